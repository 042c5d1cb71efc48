// Package drivers is the catalog of task drivers built into the berth
// binary: raw_exec and mock. Each runs as a go-plugin subprocess like any
// third-party driver; the berth binary re-executes itself as
//
//	berth builtin driver NAME
//
// (Args gives these arguments) and that command calls Serve, which serves
// the driver on stdio. Serving through the same plugin boundary as
// third-party drivers means every run of berth exercises it.
//
// Serve also runs the task executor (sdk/executor) when the process was
// started as one: raw_exec re-executes its own binary, with the same
// arguments, to supervise each task.
//
// mock is DevOnly: a dev agent offers it, other agents only when a
// `plugin "mock"` block asks for it, so that no production node advertises
// a driver whose tasks are timers.
//
// A test binary that stands in for berth (taskdrivers tests, agent tests)
// calls MainIfRequested first thing in TestMain.
package drivers
