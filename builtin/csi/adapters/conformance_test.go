//go:build linux

package adapters

import (
	"os"
	"os/exec"
	"testing"

	"berth.dev/berth/sdk/storagetest"
)

// TestMain lets this test binary stand in for berth: re-executed with
// Args(name) it serves the built-in adapter name, as `berth builtin
// csi-adapter NAME` does.
func TestMain(m *testing.M) {
	MainIfRequested(os.Args)
	os.Exit(m.Run())
}

// TestHostpathConformance runs berth's storage adapter conformance harness
// against the built-in hostpath adapter, launched as the agent launches it.
func TestHostpathConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{
		Name:          HostpathName,
		Command:       func() *exec.Cmd { return exec.Command(os.Args[0], Args(HostpathName)...) },
		Config:        []byte(`{"capacity": "1GiB", "max_volumes": 8}`),
		Volume:        storagetest.Volume{CapacityBytes: 1 << 20},
		NodeNeedsRoot: "hostpath bind-mounts volumes at the staging and publish targets",
	})
}
