// Package drivers is the catalog of task drivers built into the berth
// binary: raw_exec (package rawexec) and mock (package mock).
//
// Built-in drivers still run as go-plugin subprocesses, like third-party
// ones: the agent re-executes its own binary as `berth builtin driver NAME`,
// which looks the name up in Builtins and serves the driver with
// sdk.ServeDriver. So the plugin boundary, with its restarts and task
// recovery, is exercised by every built-in driver too. The agent hands
// Plugins (names, arguments, which are dev-only) to the client-side driver
// catalog (taskdrivers.Catalog), which imports nothing of builtin/.
package drivers
