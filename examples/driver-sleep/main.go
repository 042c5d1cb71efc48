// Command driver-sleep is an example third-party task driver for berth. It
// uses only berth's sdk: build it, put it in the agent's plugin_dir as
// "sleep", and jobs can use `driver = "sleep"`.
//
//	make plugins   # builds build/plugins/sleep
package main

import (
	"fmt"
	"os"

	"berth.dev/berth/sdk"

	"berth.dev/examples/driver-sleep/sleep"
)

func main() {
	logger := sdk.NewPluginLogger(sleep.Name)
	if err := sdk.ServeDriver(sleep.New(logger)); err != nil {
		fmt.Fprintf(os.Stderr, "driver-sleep: %v\n", err)
		os.Exit(1)
	}
}
