// Command csi-tmpdir is an example third-party storage adapter for berth: a
// CSI plugin with an identity and a node service whose volumes are plain
// directories under the adapter's data dir, bind-mounted at the publish
// target. It uses only berth's sdk: build it, put it in the agent's
// <plugin_dir>/csi/ as "tmpdir", and the node offers CSI plugin "tmpdir".
//
//	make plugins   # builds build/plugins/csi/tmpdir
package main

import (
	"fmt"
	"os"

	"berth.dev/berth/sdk"

	"berth.dev/examples/csi-tmpdir/tmpdir"
)

func main() {
	env, err := sdk.StorageAdapterEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-tmpdir: %v\n", err)
		os.Exit(1)
	}
	p, err := tmpdir.New(env, sdk.NewPluginLogger(tmpdir.Name))
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-tmpdir: %v\n", err)
		os.Exit(1)
	}
	if err := sdk.ServeStorageAdapter(sdk.StorageAdapter{Name: tmpdir.Name, Identity: p, Node: p}); err != nil {
		fmt.Fprintf(os.Stderr, "csi-tmpdir: %v\n", err)
		os.Exit(1)
	}
}
