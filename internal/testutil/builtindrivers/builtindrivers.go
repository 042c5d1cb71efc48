// Package builtindrivers lets a test binary stand in for the berth binary
// as the driver manager re-executes it: `EXECUTABLE builtin driver NAME`
// serves the built-in driver NAME, and raw_exec's executors (the same
// command line with the executor marker) run as executors. Packages whose
// tests start a client (an agent, a driver manager) call ServeIfRequested
// first thing in TestMain:
//
//	func TestMain(m *testing.M) {
//		builtindrivers.ServeIfRequested()
//		os.Exit(m.Run())
//	}
//
// Without it the re-executed test binary would run the package's tests
// instead of serving the plugin. Nothing in production code imports it.
package builtindrivers

import (
	"fmt"
	"os"
	"slices"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/executor"
)

// ServeIfRequested serves a built-in driver, or runs an executor, and
// exits when this process was started as one; otherwise it returns.
func ServeIfRequested() {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	args := os.Args
	if len(args) != 4 || !slices.Equal(args[1:3], []string{"builtin", "driver"}) {
		return
	}
	newDriver, ok := drivers.Builtins()[args[3]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown built-in driver %q\n", args[3])
		os.Exit(2)
	}
	if err := sdk.ServeDriver(newDriver(sdk.NewPluginLogger(args[3]))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}
