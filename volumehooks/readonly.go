package volumehooks

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// ErrReadOnlyMount is returned by the volume mount hook's prestart when a
// read-only volume_mount of a task under an unisolated driver (raw_exec)
// cannot be given a read-only bind mount of its own: the client is not
// root, or the kernel refused the mount. The task is not started — with
// the volume published writable for a sibling task, the publish target
// itself would let it write.
var ErrReadOnlyMount = errcode.New(codes.FailedPrecondition, "read-only volume mount for an unisolated task failed")

// ReadOnlyDir is the directory, in a task's directory, that holds the
// task's read-only bind mounts of volumes published writable for the
// alloc (taskReadOnlyPath).
const ReadOnlyDir = "csi-volumes"

// taskReadOnlyPath is where a task under an unisolated driver finds a
// volume it mounts read-only while the alloc publishes it writable (for a
// sibling that writes): <data_dir>/alloc/<alloc>/<task>/csi-volumes/<volume>,
// a read-only bind mount of the publish target that the client makes
// before the task starts and removes after every exit, at the task's and
// the alloc's destroy, and before the alloc's unpublish (so also in the
// teardown a restarted client finishes). It is what BERTH_VOLUME_<NAME>
// and ${volume.<name>} name for that task. It lives in the task's
// directory so nothing of another task or alloc can collide with it. A
// bind a crash left there (even the writable first half of bindReadOnly)
// never lets the alloc dir's removal delete the volume's data:
// AllocDir.Destroy unmounts whatever is mounted under the dir first.
func taskReadOnlyPath(taskDir, volumeID string) string {
	return filepath.Join(taskDir, ReadOnlyDir, volumeID)
}

// isTaskReadOnlyPath reports whether mount point p is a task's read-only
// bind of volumeID in the alloc dir allocDir.
func isTaskReadOnlyPath(allocDir, volumeID, p string) bool {
	rel, err := filepath.Rel(allocDir, p)
	if err != nil {
		return false
	}
	parts := strings.Split(rel, string(filepath.Separator))
	return len(parts) == 3 && parts[0] != ".." && parts[1] == ReadOnlyDir && parts[2] == volumeID
}

// unmountTaskBinds removes every task's read-only bind of volumeID in the
// alloc dir of allocID (mount points read from the client's mount table).
func unmountTaskBinds(dataDir, allocID, volumeID string) error {
	allocDir := filepath.Join(dataDir, "alloc", allocID)
	// The mount table names resolved paths.
	if resolved, err := filepath.EvalSymlinks(allocDir); err == nil {
		allocDir = resolved
	}
	points, err := mountPoints()
	if err != nil {
		return fmt.Errorf("reading the mount table for the read-only volume mounts of alloc %s: %w", allocID, err)
	}
	var errs []error
	for _, p := range points {
		if isTaskReadOnlyPath(allocDir, volumeID, p) {
			if err := unmountAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
