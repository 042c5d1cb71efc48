// Command berth is a cluster runtime: raft servers, client nodes, task drivers
// and CSI storage. See README.md.
package main

import (
	"os"

	"berth.dev/berth/host/cli"
	"berth.dev/berth/sdk/executor"
)

func main() {
	if executorRequested(os.Args) {
		os.Exit(executor.Main())
	}
	os.Exit(cli.Main(os.Args))
}
