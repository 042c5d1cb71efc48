package drivertest

import (
	"fmt"
	"os"
	"os/exec"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/executor"
)

// serveEnv marks a test binary re-executed to serve its driver.
const serveEnv = "BERTH_DRIVERTEST_SERVE"

// ServeIfPlugin serves the driver and exits when this test binary was
// re-executed as a plugin (by SelfCommand), or runs the executor when it
// was re-executed as one (see sdk/executor); otherwise it returns at once.
// Call it first thing in TestMain.
func ServeIfPlugin(newDriver func(hclog.Logger) sdk.Driver) {
	if executor.Requested() {
		os.Exit(executor.Main())
	}
	if os.Getenv(serveEnv) != "1" {
		return
	}
	logger := sdk.NewPluginLogger("drivertest")
	if err := sdk.ServeDriver(newDriver(logger)); err != nil {
		fmt.Fprintf(os.Stderr, "drivertest: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// SelfCommand returns a command that re-executes this test binary as the
// driver plugin; TestMain must call ServeIfPlugin.
func SelfCommand() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	return cmd
}
