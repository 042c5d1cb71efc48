package main

import (
	"fmt"
	"os"
	"os/exec"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/sdk/executor"
)

// driverPluginArg makes this binary serve a built-in driver as a plugin:
// `bench __driver-plugin NAME`. The drivers section launches itself that
// way, the way the agent launches `berth builtin driver NAME`.
const driverPluginArg = "__driver-plugin"

// init, not main, so that the hook lives with the section that needs it:
// before flags are parsed, a re-executed bench becomes the plugin, or (for
// raw_exec tasks, in-process or in a plugin) the task's executor.
func init() {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	if len(os.Args) == 3 && os.Args[1] == driverPluginArg {
		if err := drivers.Serve(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "bench driver plugin %s: %v\n", os.Args[2], err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// driverPluginCmd returns the command that serves driver name from this
// binary.
func driverPluginCmd(name string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, driverPluginArg, name), nil
}
