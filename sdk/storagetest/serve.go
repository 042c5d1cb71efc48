package storagetest

import (
	"fmt"
	"os"
	"os/exec"

	"berth.dev/berth/sdk"
)

// serveEnv marks a test binary re-executed to serve its adapter.
const serveEnv = "BERTH_STORAGETEST_SERVE"

// ServeIfAdapter serves the adapter newAdapter builds and exits when this
// test binary was re-executed as one (by SelfCommand); otherwise it
// returns at once. newAdapter gets what berth told the adapter
// (sdk.StorageAdapterEnv). Call it first thing in TestMain.
func ServeIfAdapter(newAdapter func(env sdk.StorageEnv) (sdk.StorageAdapter, error)) {
	if os.Getenv(serveEnv) != "1" {
		return
	}
	os.Exit(serve(newAdapter))
}

func serve(newAdapter func(env sdk.StorageEnv) (sdk.StorageAdapter, error)) int {
	env, err := sdk.StorageAdapterEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "storagetest: %v\n", err)
		return 1
	}
	a, err := newAdapter(env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "storagetest: %v\n", err)
		return 1
	}
	if err := sdk.ServeStorageAdapter(a); err != nil {
		fmt.Fprintf(os.Stderr, "storagetest: %v\n", err)
		return 1
	}
	return 0
}

// SelfCommand returns a command that re-executes this test binary as the
// adapter; TestMain must call ServeIfAdapter.
func SelfCommand() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	return cmd
}
