// Command containerd is berth's containerd task driver: a third-party
// plugin built only against berth's sdk and containerd's Go client. Build
// it, put it in the agent's plugin_dir as "containerd", and jobs can use
// `driver = "containerd"` (see the ctrdriver package for its configs).
//
//	make plugins   # builds build/plugins/containerd
package main

import (
	"fmt"
	"os"

	"berth.dev/berth/sdk"

	"berth.dev/examples/containerd/ctrdriver"
)

func main() {
	logger := sdk.NewPluginLogger(ctrdriver.Name)
	if err := sdk.ServeDriver(ctrdriver.New(logger)); err != nil {
		fmt.Fprintf(os.Stderr, "containerd driver: %v\n", err)
		os.Exit(1)
	}
}
