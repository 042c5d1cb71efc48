package adapters

import "berth.dev/berth/internal/pluginsup"

// errs are the adapters' sentinels, the plugin managers' one family
// (pluginsup.Family) worded for storage adapters.
var errs = pluginsup.NewFamily(pluginsup.Nouns{One: "storage adapter", Process: "storage adapter", Service: "storage adapter"})

var (
	// ErrUnknownAdapter is returned by Manager.Adapter for a name that is
	// not in the catalog.
	ErrUnknownAdapter = errs.Unknown

	// ErrAdapterMissing is reported (in an *AdapterError) for a configured
	// adapter that is neither built in nor an executable in <plugin_dir>/csi.
	ErrAdapterMissing = errs.Missing

	// ErrAdapterNotExecutable is reported for a <plugin_dir>/csi file that
	// is not an executable regular file.
	ErrAdapterNotExecutable = errs.NotExecutable

	// ErrInvalidConfig is reported for a plugin block config the adapter
	// refuses; no restart fixes it, so the manager does not retry, and
	// Start returns it.
	ErrInvalidConfig = errs.InvalidConfig

	// ErrAdapterStart is reported when an adapter process could not be
	// brought up (crashed before the handshake, another protocol or API
	// version, timed out); joined to its cause with errcode.Fallback.
	ErrAdapterStart = errs.Start

	// ErrAdapterName is reported when an adapter calls itself by another
	// name than its catalog name (its file name in <plugin_dir>/csi).
	ErrAdapterName = errs.Name

	// ErrAdapterExited is reported when a running adapter process exits or
	// stops answering; the manager restarts it.
	ErrAdapterExited = errs.Exited

	// ErrAdapterUnavailable is what a call through Handle.Conn fails with
	// when no adapter process ran before the call's deadline; joined to the
	// last failure.
	ErrAdapterUnavailable = errs.Unavailable

	// ErrAdapterFailed is what every call through Handle.Conn fails with
	// when the adapter failed for good (an invalid config).
	ErrAdapterFailed = errs.Failed

	// ErrShutdown is returned by calls once the manager is shutting down,
	// and by Manager.Start after Shutdown.
	ErrShutdown = errs.Shutdown

	// ErrNestedPlugin is returned by Manager.Start in a process that is
	// itself a plugin (a storage adapter or a driver): launching adapters
	// from there would recurse.
	ErrNestedPlugin = errs.Nested
)

// AdapterError is why a storage adapter cannot run, naming the adapter
// (Name), its executable and the plugin block that configured it. Its Err
// is one of this package's sentinels, or what the adapter said.
type AdapterError = pluginsup.PluginError
