package adapters

import "berth.dev/berth/internal/pluginsup"

// noun names storage adapters in their errors (*AdapterError): the
// sentinels are the plugin managers' one set (pluginsup), shared with the
// task drivers.
const noun pluginsup.Noun = "storage adapter"

var (
	// ErrUnknownAdapter is returned by Manager.Adapter for a name that is
	// not in the catalog.
	ErrUnknownAdapter = pluginsup.ErrUnknown

	// ErrAdapterMissing is reported (in an *AdapterError) for a configured
	// adapter that is neither built in nor an executable in <plugin_dir>/csi.
	ErrAdapterMissing = pluginsup.ErrMissing

	// ErrAdapterNotExecutable is reported for a <plugin_dir>/csi file that
	// is not an executable regular file.
	ErrAdapterNotExecutable = pluginsup.ErrNotExecutable

	// ErrInvalidConfig is reported for a plugin block config the adapter
	// refuses; no restart fixes it, so the manager does not retry, and
	// Start returns it.
	ErrInvalidConfig = pluginsup.ErrInvalidConfig

	// ErrAdapterStart is reported when an adapter process could not be
	// brought up (crashed before the handshake, another protocol or API
	// version, timed out); joined to its cause with errcode.Fallback.
	ErrAdapterStart = pluginsup.ErrStart

	// ErrAdapterName is reported when an adapter calls itself by another
	// name than its catalog name (its file name in <plugin_dir>/csi).
	ErrAdapterName = pluginsup.ErrName

	// ErrAdapterExited is reported when a running adapter process exits or
	// stops answering; the manager restarts it.
	ErrAdapterExited = pluginsup.ErrExited

	// ErrAdapterUnavailable is what a call through Handle.Conn fails with
	// when no adapter process ran before the call's deadline; joined to the
	// last failure.
	ErrAdapterUnavailable = pluginsup.ErrUnavailable

	// ErrAdapterFailed is what every call through Handle.Conn fails with
	// when the adapter failed for good (an invalid config).
	ErrAdapterFailed = pluginsup.ErrFailed

	// ErrShutdown is returned by calls once the manager is shutting down,
	// and by Manager.Start after Shutdown.
	ErrShutdown = pluginsup.ErrShutdown

	// ErrNestedPlugin is returned by Manager.Start in a process that is
	// itself a plugin (a storage adapter or a driver): launching adapters
	// from there would recurse.
	ErrNestedPlugin = pluginsup.ErrNested
)

// AdapterError is why a storage adapter cannot run, naming the adapter
// (Name), its executable and the plugin block that configured it. Its Err
// is one of this package's sentinels, or what the adapter said.
type AdapterError = pluginsup.PluginError
