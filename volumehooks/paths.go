package volumehooks

import (
	"fmt"
	"path/filepath"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

var (
	// ErrSocketPathTooLong is returned by the supervisor's prestart when a
	// plugin's socket path, on the host or in the task, is longer than a
	// unix socket address holds (MaxSocketPath bytes). The plugin could not
	// listen there, nor berth dial it: the task is not started, and the
	// error names the path; a shorter client data_dir (or csi_plugin
	// mount_dir) fixes it.
	ErrSocketPathTooLong = errcode.New(codes.FailedPrecondition, "csi plugin socket path too long for a unix socket")
	// ErrInvalidPluginBlock is returned by the supervisor's prestart for a
	// csi_plugin block the job validation should have refused (an unknown
	// type, a missing ID, a relative directory).
	ErrInvalidPluginBlock = errcode.New(codes.InvalidArgument, "invalid csi_plugin block")
	// ErrNotConfigured is returned by the supervisor's prestart when the
	// client built it without a data dir or a plugin registry: the node
	// cannot run plugin tasks.
	ErrNotConfigured = errcode.New(codes.FailedPrecondition, "csi_plugin supervisor not configured on this client")
)

// MaxSocketPath is the longest path a unix socket address (sockaddr_un's
// sun_path, with its terminating NUL) holds on Linux.
const MaxSocketPath = 107

// SocketName is the plugin's socket file in its plugin directory.
const SocketName = "csi.sock"

// PluginDir is the host directory of the task-launched plugin of task
// in alloc: <data_dir>/csi/plugins/<alloc>-<task>/ (an alloc ID has a
// fixed length, so the name is unambiguous). It holds the plugin's socket
// and is what an isolating driver mounts at the task's csi_plugin
// mount_dir. It is per task, not per alloc: a group may run a plugin's
// controller and node as two tasks, each with its own socket.
func PluginDir(dataDir, allocID, task string) string {
	return filepath.Join(dataDir, "csi", "plugins", allocID+"-"+task)
}

// PluginSocket is the host path of the plugin's socket:
// <data_dir>/csi/plugins/<alloc>-<task>/csi.sock. Its endpoint is
// "unix://" and the path; it is what the registry records.
func PluginSocket(dataDir, allocID, task string) string {
	return filepath.Join(PluginDir(dataDir, allocID, task), SocketName)
}

// StagePublishDir is the host directory under which the volumes of plugin
// pluginID are staged and published: <data_dir>/csi/volumes/<plugin>/. It
// is keyed by plugin ID, not alloc, so a newer alloc of the plugin (an
// update) sees what the older one staged. An isolating driver mounts it at
// the task's csi_plugin stage_publish_base_dir.
func StagePublishDir(dataDir, pluginID string) string {
	return filepath.Join(dataDir, "csi", "volumes", pluginID)
}

// checkSocketPath refuses a socket path a unix socket cannot hold.
func checkSocketPath(where, path string) error {
	if len(path) > MaxSocketPath {
		return fmt.Errorf("%w: %s socket path %q is %d bytes, more than the %d a unix socket address holds",
			ErrSocketPathTooLong, where, path, len(path), MaxSocketPath)
	}
	return nil
}

// maxDataDir is the longest data_dir whose socket path, socket (built
// from dataDir), a unix socket address holds; 0 when none does.
func maxDataDir(dataDir, socket string) int {
	return max(0, MaxSocketPath-(len(socket)-len(dataDir)))
}
