//go:build linux

package adapters

import (
	"os"
	"os/exec"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

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
// against the built-in hostpath adapter, launched as the agent launches it:
// with a single-writer volume, and with one published twice on the node at
// once (hostpath advertises SINGLE_NODE_MULTI_WRITER).
func TestHostpathConformance(t *testing.T) {
	for name, mode := range map[string]csipb.VolumeCapability_AccessMode_Mode{
		"SingleWriter": csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		"MultiWriter":  csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER,
	} {
		t.Run(name, func(t *testing.T) {
			storagetest.Run(t, storagetest.Harness{
				Name:          HostpathName,
				Command:       func() *exec.Cmd { return exec.Command(os.Args[0], Args(HostpathName)...) },
				Config:        []byte(`{"capacity": "1GiB", "max_volumes": 8}`),
				Volume:        storagetest.Volume{CapacityBytes: 1 << 20, Capability: storagetest.MountCapability(mode)},
				NodeNeedsRoot: "hostpath bind-mounts volumes at the staging and publish targets",
			})
		})
	}
}
