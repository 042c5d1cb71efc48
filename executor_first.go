package main

import "berth.dev/berth/sdk/executor"

// executorRequested reports whether this process is a task's executor, or
// its namespace init, that a built-in driver plugin (`berth builtin driver
// NAME`) re-executed: main runs it before building the CLI. Every task
// start pays for two of these processes (raw_exec one), and the command
// tree, its flags and its parsing are work they never use; drivers.Serve
// dispatches the same processes the same way when they do get there. Other
// commands are never an executor, whatever their environment.
func executorRequested(args []string) bool {
	return len(args) >= 3 && args[1] == "builtin" && args[2] == "driver" && executor.Requested()
}
