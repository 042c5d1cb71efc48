package pluginsup

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// Nouns name one kind of plugin in its errors.
type Nouns struct {
	// One names a plugin of the kind: "driver", "storage adapter".
	One string
	// Process names its process: "driver plugin", "storage adapter".
	Process string
	// Service names what calls reach: "task driver", "storage adapter".
	Service string
}

// Family is the one set of sentinel errors of a plugin manager, made by
// NewFamily for its kind of plugin: every kind has the same sentinels
// with the same codes, worded with its own nouns, so that a driver's
// errors say "driver" and an adapter's "storage adapter". Each manager
// exports its family's sentinels under its own names (taskdrivers
// ErrPluginMissing is its Family's Missing).
type Family struct {
	nouns Nouns

	// Unknown (NotFound) is returned for a name not in the catalog.
	Unknown error
	// Missing (NotFound) is reported for a configured plugin that is
	// neither built in nor an executable in its plugin directory.
	Missing error
	// NotExecutable (FailedPrecondition) is reported for a file of the
	// plugin directory that is not an executable regular file.
	NotExecutable error
	// InvalidConfig (InvalidArgument) is reported for a plugin config a
	// built-in plugin's checker refuses; no restart fixes it.
	InvalidConfig error
	// Start (Unavailable) is reported when a process could not be brought
	// up: it crashed or exited before the handshake, speaks another
	// protocol or API version, or timed out. It is joined to its cause
	// with errcode.Fallback, so the error's code is the cause's when the
	// cause has one.
	Start error
	// Name (FailedPrecondition) is reported when a plugin calls itself by
	// another name than its catalog name (its file name).
	Name error
	// Exited (Unavailable) is reported when a running process exits or
	// stops answering; the manager restarts it.
	Exited error
	// Unavailable (Unavailable) is what a call fails with when no process
	// of the plugin runs now.
	Unavailable error
	// Failed (FailedPrecondition) is what every call fails with once the
	// plugin failed for good (an invalid config): the request is fine,
	// the node's config refuses it.
	Failed error
	// Shutdown (Unavailable) is returned by calls once the manager is
	// shutting down, and by its Start after Shutdown.
	Shutdown error
	// Nested (FailedPrecondition) is returned by a manager's Start in a
	// process that is itself a plugin: launching plugins from there would
	// recurse.
	Nested error
}

// NewFamily returns the sentinels of the kind of plugin nouns names.
func NewFamily(n Nouns) *Family {
	return &Family{
		nouns:         n,
		Unknown:       errcode.New(codes.NotFound, "unknown "+n.Service),
		Missing:       errcode.New(codes.NotFound, n.Process+" not found"),
		NotExecutable: errcode.New(codes.FailedPrecondition, n.Process+" is not executable"),
		InvalidConfig: errcode.New(codes.InvalidArgument, "invalid "+n.One+" config"),
		Start:         errcode.New(codes.Unavailable, n.Process+" failed to start"),
		Name:          errcode.New(codes.FailedPrecondition, n.Process+" reports another name"),
		Exited:        errcode.New(codes.Unavailable, n.Process+" exited"),
		Unavailable:   errcode.New(codes.Unavailable, n.Service+" is not available"),
		Failed:        errcode.New(codes.FailedPrecondition, n.Service+" failed for good"),
		Shutdown:      errcode.New(codes.Unavailable, n.One+" manager is shut down"),
		Nested:        errcode.New(codes.FailedPrecondition, "refusing to launch "+n.Process+"s from inside a plugin process"),
	}
}

// Nouns returns the nouns the family was made with.
func (f *Family) Nouns() Nouns { return f.nouns }

// Wrap names the plugin of e in err: why that plugin cannot run.
func (f *Family) Wrap(e Named, err error) *PluginError {
	name, path, source := e.Identity()
	return &PluginError{Noun: f.nouns.One, Name: name, Path: path, Source: source, Err: err}
}

// Named is a plugin as a PluginError names it: a catalog Entry.
type Named interface {
	Identity() (name, path, source string)
}

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
	// Err is one of the Family's sentinels, a configuration error, or
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
