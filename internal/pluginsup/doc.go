// Package pluginsup is the one plugin machinery of berth's go-plugin
// subprocesses: what the task driver manager (taskdrivers) and the
// storage adapter manager (csi/adapters) both do with their plugins. It
// has four parts, each one generic implementation that the two managers
// instantiate thinly.
//
// The supervisor. An Instance launches its plugin (or reattaches to the
// process a previous client left running, from a persisted Record; a
// Record whose write fails is written again, with backoff, while the
// process runs), makes it ready, watches it, and restarts it with capped
// exponential backoff when it dies or a caller reports it gone; a failure
// that no restart fixes (an invalid config) keeps it down for good.
// Callers get the running process from Acquire, which can wait through a
// restart. A Supervisor holds a manager's instances and starts, stops and
// abandons them together.
//
// The catalog. Catalog lists a node's plugins of one kind: the built-in
// ones, handed in as Builtins by the composition root (the agent passes
// builtin/drivers.Plugins and builtin/csi/adapters.Plugins, so neither
// manager imports builtin/), the executables found in a plugin directory,
// and each plugin block's config, read by the kind's Parse and, for a
// built-in, checked by its CheckConfig.
//
// The options. Options are the settings every manager has (logger, start
// timeout, restart backoff, reset time, berth version) with their
// defaults; each manager's Config embeds them.
//
// The errors. One set of sentinels (ErrMissing, ErrStart, ErrExited,
// ErrUnavailable, ErrFailed, ErrShutdown, ...), each with its gRPC code,
// serves both kinds; each manager exports them under its own names
// (taskdrivers.ErrPluginMissing, adapters.ErrAdapterMissing). A kind's
// Noun ("driver", "storage adapter") names its plugins in a PluginError,
// which also says the executable and the config block: `driver "gpu"
// (/opt/berth/plugins/gpu), configured at agent.hcl:3: plugin not found`.
//
// What differs between kinds of plugin is passed in, typed: P is the
// process as the sdk's launcher returns it (*sdk.DriverPlugin,
// *sdk.StoragePlugin), T is what the package builds from a ready process
// (a driver's client, schemas and capabilities; an adapter's connection),
// C is a plugin's config as the kind reads it (sdk.ConfigMap, raw JSON).
// A package implements Plugin (launch, set up, watch) and Observer (up,
// down: its health and events), stores Records its own way, and maps an
// Outage to its own error.
//
// The process machinery below it (socket directories, stderr tail, the
// executable check) is internal/pluginproc.
package pluginsup
