package main

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/storagetest"

	"berth.dev/examples/csi-tmpdir/tmpdir"
)

// serveEnv makes this test binary run main, as berth runs the adapter.
const serveEnv = "CSI_TMPDIR_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestServesOverGoPlugin launches the adapter as berth does (handshake,
// API negotiation, config in the environment) and calls it over the
// go-plugin connection.
func TestServesOverGoPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1",
		sdk.EnvStorageConfig+`={"max_volumes": 2}`, sdk.EnvStorageNodeID+"=node-9", sdk.EnvStorageDataDir+"="+t.TempDir())
	p, err := sdk.LaunchStorageAdapter(ctx, sdk.LaunchConfig{Name: tmpdir.Name, Cmd: cmd})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Adapter().Name() != tmpdir.Name {
		t.Errorf("adapter calls itself %q", p.Adapter().Name())
	}
	info, err := csipb.NewIdentityClient(p.Adapter().Conn()).GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != tmpdir.ProviderName {
		t.Fatalf("GetPluginInfo = %v, %v", info, err)
	}
	ni, err := csipb.NewNodeClient(p.Adapter().Conn()).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "node-9" || ni.GetMaxVolumesPerNode() != 2 {
		t.Fatalf("NodeGetInfo = %v, %v", ni, err)
	}
}

// serveCommand re-executes this test binary running main, as berth runs
// the built adapter.
func serveCommand() *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"=1")
	return cmd
}

// TestConformance runs berth's storage adapter conformance harness against
// the adapter's main. tmpdir creates no volumes (it has no controller): any
// valid ID is a volume, made on first publish.
func TestConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{
		Name:          tmpdir.Name,
		Command:       serveCommand,
		Config:        []byte(`{"max_volumes": 2}`),
		Volume:        storagetest.Volume{ExistingID: "storagetest-volume"},
		NodeNeedsRoot: "it bind-mounts each volume's directory at the publish target",
	})
}
