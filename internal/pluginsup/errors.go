package pluginsup

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// The plugin managers' one set of sentinels. Each manager exports them
// under its own names (taskdrivers.ErrPluginMissing is ErrMissing,
// adapters.ErrAdapterMissing too); its errors name the kind of plugin by
// wrapping them in a *PluginError of its Noun.
var (
	// ErrUnknown is returned for a name not in the catalog.
	ErrUnknown = errcode.New(codes.NotFound, "unknown plugin")

	// ErrMissing is reported for a configured plugin that is neither
	// built in nor an executable in its plugin directory.
	ErrMissing = errcode.New(codes.NotFound, "plugin not found")

	// ErrNotExecutable is reported for a file of the plugin directory
	// that is not an executable regular file.
	ErrNotExecutable = errcode.New(codes.FailedPrecondition, "plugin is not executable")

	// ErrInvalidConfig is reported for a plugin config a built-in
	// plugin's checker (Builtin.CheckConfig) refuses; no restart fixes it.
	ErrInvalidConfig = errcode.New(codes.InvalidArgument, "invalid plugin config")

	// ErrStart is reported when a process could not be brought up: it
	// crashed or exited before the handshake, speaks another protocol or
	// API version, or timed out. It is joined to its cause with
	// errcode.Fallback, so the error's code is the cause's when the cause
	// has one (no common API version: FailedPrecondition, which retrying
	// does not fix) and Unavailable otherwise.
	ErrStart = errcode.New(codes.Unavailable, "plugin failed to start")

	// ErrName is reported when a plugin calls itself by another name than
	// its catalog name (its file name in the plugin directory).
	ErrName = errcode.New(codes.FailedPrecondition, "plugin reports another name")

	// ErrExited is reported when a running process exits or stops
	// answering; the manager restarts it.
	ErrExited = errcode.New(codes.Unavailable, "plugin exited")

	// ErrUnavailable is what a call fails with when no process of the
	// plugin runs now: starting, restarting, or failing to start while
	// the manager keeps trying.
	ErrUnavailable = errcode.New(codes.Unavailable, "plugin is not available")

	// ErrFailed is what every call fails with once the plugin failed for
	// good (an invalid config), until the agent config is fixed. It is
	// FailedPrecondition, not the config error's InvalidArgument: the
	// caller's request is fine, the node's config refuses it.
	ErrFailed = errcode.New(codes.FailedPrecondition, "plugin failed for good")

	// ErrShutdown is returned by calls once the manager is shutting down,
	// and by its Start after Shutdown.
	ErrShutdown = errcode.New(codes.Unavailable, "plugin manager is shut down")

	// ErrNested is returned by a manager's Start in a process that is
	// itself a plugin: launching plugins from there would recurse.
	ErrNested = errcode.New(codes.FailedPrecondition, "refusing to launch plugins from inside a plugin process")
)

// Noun names a kind of plugin in its errors: "driver", "storage adapter".
// It is the one thing the kinds' errors differ in.
type Noun string

// Named is a plugin as a PluginError names it: a catalog Entry.
type Named interface {
	Identity() (name, path, source string)
}

// Wrap names the plugin e in err: why that plugin cannot run.
func (n Noun) Wrap(e Named, err error) *PluginError {
	name, path, source := e.Identity()
	return &PluginError{Noun: string(n), Name: name, Path: path, Source: source, Err: err}
}

// Unknown is ErrUnknown for the plugin name.
func (n Noun) Unknown(name string) error { return fmt.Errorf("%s %q: %w", n, name, ErrUnknown) }

// PluginError is why a plugin cannot run, naming the plugin, its
// executable and the config block that configured it.
type PluginError struct {
	// Noun names the kind of plugin: "driver", "storage adapter".
	Noun string
	// Name is the plugin's catalog name.
	Name string
	// Path is the plugin executable; empty when there is none.
	Path string
	// Source is "file:line" of the plugin's config block, if any.
	Source string
	// Err is one of this package's sentinels, a configuration error, or
	// what the plugin said.
	Err error
}

// Error implements error.
func (e *PluginError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", e.Noun, e.Name)
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
