package taskdrivers

import (
	"errors"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
)

// noun names drivers in their errors (*PluginError): the sentinels are the
// plugin managers' one set (pluginsup), shared with the storage adapters.
const noun pluginsup.Noun = "driver"

var (
	// ErrUnknownDriver is returned by Manager.Driver for a name that is not
	// in the catalog.
	ErrUnknownDriver = pluginsup.ErrUnknown

	// ErrPluginMissing is reported (in a *PluginError) for a plugin that is
	// neither built in nor an executable in plugin_dir.
	ErrPluginMissing = pluginsup.ErrMissing

	// ErrPluginNotExecutable is reported for a plugin_dir file that is not
	// an executable regular file.
	ErrPluginNotExecutable = pluginsup.ErrNotExecutable

	// ErrPluginStart is reported when a plugin process could not be brought
	// up: it crashed or exited before the handshake, speaks another
	// go-plugin protocol version or driver API version, or timed out. It is
	// joined to its cause with errcode.Fallback, so the error's code is the
	// cause's when the cause has one (no common API version:
	// FailedPrecondition, which retrying does not fix) and Unavailable
	// otherwise.
	ErrPluginStart = pluginsup.ErrStart

	// ErrPluginName is reported when a plugin calls itself by another name
	// than the one berth knows it by (its file name in plugin_dir).
	ErrPluginName = pluginsup.ErrName

	// ErrPluginExited is reported when a running plugin process exits or
	// stops answering; the manager restarts it.
	ErrPluginExited = pluginsup.ErrExited

	// ErrDriverUnavailable is returned by Driver calls that do not wait
	// (StartTask) when the driver's plugin is not running now: still
	// starting, restarting, or failing to start while the manager keeps
	// trying. It is joined to why with errcode.Fallback: the code is the
	// last failure's when that has one (a missing plugin is NotFound, an
	// incompatible one FailedPrecondition), Unavailable otherwise.
	ErrDriverUnavailable = pluginsup.ErrUnavailable

	// ErrDriverFailed is returned by every Driver call, waiting or not, when
	// the driver failed for good: its plugin config is invalid, so the
	// manager does not restart it until the agent config is fixed. It is
	// FailedPrecondition, not the config error's InvalidArgument: the
	// caller's request is fine, the node's config refuses it.
	ErrDriverFailed = pluginsup.ErrFailed

	// ErrMountsNotSupported is returned by StartTask for a task with mounts
	// on a driver that does not honour them (no mount_volumes capability,
	// or a plugin that negotiated a driver API version before mounts): the
	// task is refused rather than run without its mounts. It is
	// FailedPrecondition: the task is fine, this driver cannot run it.
	ErrMountsNotSupported = errcode.New(codes.FailedPrecondition, "task driver does not honour mounts")

	// ErrShutdown is returned by Driver calls once the manager is shutting
	// down, and by Manager.Start after Shutdown.
	ErrShutdown = pluginsup.ErrShutdown

	// ErrNestedPlugin is returned by Manager.Start in a process that is
	// itself a driver plugin: launching plugins from there would recurse.
	ErrNestedPlugin = pluginsup.ErrNested
)

// PluginError is why a driver plugin cannot run, naming the driver (Name),
// its executable and the config block that configured it. Its Err is one
// of this package's sentinels, a configuration error (sdk.ErrInvalidConfig,
// sdk.ErrConfigJSON), or what the plugin said.
type PluginError = pluginsup.PluginError

// isConfigError reports whether err is a mistake in the plugin's config:
// retrying cannot fix it, only editing the agent config can.
func isConfigError(err error) bool {
	return errors.Is(err, sdk.ErrInvalidConfig) || errors.Is(err, sdk.ErrConfigJSON) || errors.Is(err, pluginsup.ErrInvalidConfig)
}
