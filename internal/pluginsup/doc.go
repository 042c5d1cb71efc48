// Package pluginsup supervises go-plugin subprocesses: one generic
// implementation of what the task driver manager (taskdrivers) and the
// storage adapter manager (csiadapters) both do with each plugin of their
// catalog. An Instance launches its plugin (or reattaches to the process a
// previous client left running, from a persisted Record; a Record whose
// write fails is written again, with backoff, while the process runs),
// makes it ready,
// watches it, and restarts it with capped exponential backoff when it dies
// or a caller reports it gone; a failure that no restart fixes (an invalid
// config) keeps it down for good. Callers get the running process from
// Acquire, which can wait through a restart. A Supervisor holds a
// manager's instances and starts, stops and abandons them together.
//
// What differs between kinds of plugin is passed in, typed: P is the
// process as the sdk's launcher returns it (*sdk.DriverPlugin,
// *sdk.StoragePlugin), T is what the package builds from a ready process
// (a driver's client, schemas and capabilities; an adapter's connection).
// A package implements Plugin (launch, set up, watch) and Observer (up,
// down: its health and events), stores Records its own way, and maps an
// Outage to its own sentinel errors, so its gRPC codes stay its own.
//
// The process machinery below it (backoff, socket directories, stderr
// tail) is internal/pluginproc.
package pluginsup
