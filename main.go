// Command berth is a cluster runtime: raft servers, client nodes, task drivers
// and CSI storage. See README.md.
package main

import (
	"os"

	"berth.dev/berth/host/cli"
)

func main() {
	os.Exit(cli.Main(os.Args))
}
