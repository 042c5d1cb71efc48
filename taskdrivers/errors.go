package taskdrivers

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk"
)

var (
	// ErrUnknownDriver is returned by Manager.Driver for a name that is not
	// in the catalog.
	ErrUnknownDriver = errcode.New(codes.NotFound, "unknown task driver")

	// ErrPluginMissing is reported (in a *PluginError) for a plugin that is
	// neither built in nor an executable in plugin_dir.
	ErrPluginMissing = errcode.New(codes.NotFound, "driver plugin not found")

	// ErrPluginNotExecutable is reported for a plugin_dir file that is not
	// an executable regular file.
	ErrPluginNotExecutable = errcode.New(codes.FailedPrecondition, "driver plugin is not executable")

	// ErrPluginStart is reported when a plugin process could not be brought
	// up: it crashed or exited before the handshake, speaks another
	// go-plugin protocol version or driver API version, or timed out. It is
	// joined to its cause with errcode.Fallback, so the error's code is the
	// cause's when the cause has one (no common API version:
	// FailedPrecondition, which retrying does not fix) and Unavailable
	// otherwise.
	ErrPluginStart = errcode.New(codes.Unavailable, "driver plugin failed to start")

	// ErrPluginName is reported when a plugin calls itself by another name
	// than the one berth knows it by (its file name in plugin_dir).
	ErrPluginName = errcode.New(codes.FailedPrecondition, "driver plugin reports another name")

	// ErrPluginExited is reported when a running plugin process exits or
	// stops answering; the manager restarts it.
	ErrPluginExited = errcode.New(codes.Unavailable, "driver plugin exited")

	// ErrDriverUnavailable is returned by Driver calls that do not wait
	// (StartTask) when the driver's plugin is not running now: still
	// starting, restarting, or failing to start while the manager keeps
	// trying. It is joined to why with errcode.Fallback: the code is the
	// last failure's when that has one (a missing plugin is NotFound, an
	// incompatible one FailedPrecondition), Unavailable otherwise.
	ErrDriverUnavailable = errcode.New(codes.Unavailable, "task driver is not available")

	// ErrDriverFailed is returned by every Driver call, waiting or not, when
	// the driver failed for good: its plugin config is invalid, so the
	// manager does not restart it until the agent config is fixed. It is
	// FailedPrecondition, not the config error's InvalidArgument: the
	// caller's request is fine, the node's config refuses it.
	ErrDriverFailed = errcode.New(codes.FailedPrecondition, "task driver failed for good")

	// ErrMountsNotSupported is returned by StartTask for a task with mounts
	// on a driver that does not honour them (no mount_volumes capability,
	// or a plugin that negotiated a driver API version before mounts): the
	// task is refused rather than run without its mounts. It is
	// FailedPrecondition: the task is fine, this driver cannot run it.
	ErrMountsNotSupported = errcode.New(codes.FailedPrecondition, "task driver does not honour mounts")

	// ErrShutdown is returned by Driver calls once the manager is shutting
	// down, and by Manager.Start after Shutdown.
	ErrShutdown = errcode.New(codes.Unavailable, "driver manager is shut down")

	// ErrNestedPlugin is returned by Manager.Start in a process that is
	// itself a driver plugin: launching plugins from there would recurse.
	ErrNestedPlugin = errcode.New(codes.FailedPrecondition, "refusing to launch driver plugins from inside a driver plugin process")
)

// PluginError is why a driver plugin cannot run, naming the driver, its
// executable and the config block that configured it.
type PluginError struct {
	// Driver is the driver's name.
	Driver string
	// Path is the plugin executable; empty when there is none.
	Path string
	// Source is "file:line" of the driver's plugin block, if any.
	Source string
	// Err is one of this package's sentinels, a configuration error
	// (sdk.ErrInvalidConfig, sdk.ErrConfigJSON), or what the plugin said.
	Err error
}

// Error implements error.
func (e *PluginError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver %q", e.Driver)
	if e.Path != "" {
		fmt.Fprintf(&b, " (%s)", e.Path)
	}
	if e.Source != "" {
		fmt.Fprintf(&b, ", configured at %s", e.Source)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *PluginError) Unwrap() error { return e.Err }

// isConfigError reports whether err is a mistake in the plugin's config:
// retrying cannot fix it, only editing the agent config can.
func isConfigError(err error) bool {
	return errors.Is(err, sdk.ErrInvalidConfig) || errors.Is(err, sdk.ErrConfigJSON)
}
