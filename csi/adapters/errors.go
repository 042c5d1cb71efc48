package adapters

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

var (
	// ErrUnknownAdapter is returned by Manager.Adapter for a name that is
	// not in the catalog.
	ErrUnknownAdapter = errcode.New(codes.NotFound, "unknown storage adapter")

	// ErrAdapterMissing is reported (in an *AdapterError) for a configured
	// adapter that is neither built in nor an executable in <plugin_dir>/csi.
	ErrAdapterMissing = errcode.New(codes.NotFound, "storage adapter not found")

	// ErrAdapterNotExecutable is reported for a <plugin_dir>/csi file that
	// is not an executable regular file.
	ErrAdapterNotExecutable = errcode.New(codes.FailedPrecondition, "storage adapter is not executable")

	// ErrInvalidConfig is reported for a plugin block config the adapter
	// refuses; no restart fixes it, so the manager does not retry, and
	// Start returns it.
	ErrInvalidConfig = errcode.New(codes.InvalidArgument, "invalid storage adapter config")

	// ErrAdapterStart is reported when an adapter process could not be
	// brought up (crashed before the handshake, another protocol or API
	// version, timed out); joined to its cause with errcode.Fallback.
	ErrAdapterStart = errcode.New(codes.Unavailable, "storage adapter failed to start")

	// ErrAdapterName is reported when an adapter calls itself by another
	// name than its catalog name (its file name in <plugin_dir>/csi).
	ErrAdapterName = errcode.New(codes.FailedPrecondition, "storage adapter reports another name")

	// ErrAdapterExited is reported when a running adapter process exits or
	// stops answering; the manager restarts it.
	ErrAdapterExited = errcode.New(codes.Unavailable, "storage adapter exited")

	// ErrAdapterUnavailable is what a call through Handle.Conn fails with
	// when no adapter process ran before the call's deadline; joined to the
	// last failure.
	ErrAdapterUnavailable = errcode.New(codes.Unavailable, "storage adapter is not available")

	// ErrAdapterFailed is what every call through Handle.Conn fails with
	// when the adapter failed for good (an invalid config).
	ErrAdapterFailed = errcode.New(codes.FailedPrecondition, "storage adapter failed for good")

	// ErrShutdown is returned by calls once the manager is shutting down,
	// and by Manager.Start after Shutdown.
	ErrShutdown = errcode.New(codes.Unavailable, "storage adapter manager is shut down")
)

// AdapterError is why a storage adapter cannot run, naming the adapter, its
// executable and the plugin block that configured it.
type AdapterError struct {
	// Adapter is the adapter's catalog name.
	Adapter string
	// Path is the executable; empty when there is none.
	Path string
	// Source is "file:line" of the adapter's plugin block, if any.
	Source string
	// Err is one of this package's sentinels, or what the adapter said.
	Err error
}

// Error implements error.
func (e *AdapterError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "storage adapter %q", e.Adapter)
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
func (e *AdapterError) Unwrap() error { return e.Err }
