package tmpdir

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk"
)

func newPlugin(t *testing.T, cfg string) *Plugin {
	t.Helper()
	p, err := New(sdk.StorageEnv{Config: json.RawMessage(cfg), NodeID: "node-1", DataDir: t.TempDir()}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIdentityAndNodeInfo(t *testing.T) {
	p := newPlugin(t, `{"max_volumes": 5}`)
	ctx := context.Background()
	info, err := p.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil || info.GetName() != ProviderName || info.GetVendorVersion() != Version {
		t.Errorf("GetPluginInfo = %v, %v", info, err)
	}
	if _, err := p.Probe(ctx, &csipb.ProbeRequest{}); err != nil {
		t.Errorf("Probe: %v", err)
	}
	ni, err := p.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || ni.GetNodeId() != "node-1" || ni.GetMaxVolumesPerNode() != 5 {
		t.Errorf("NodeGetInfo = %v, %v", ni, err)
	}
	if _, err := New(sdk.StorageEnv{Config: json.RawMessage(`{"max_volumes": -1}`), NodeID: "n", DataDir: t.TempDir()}, hclog.NewNullLogger()); err == nil {
		t.Error("negative max_volumes accepted")
	}
}

// Publish bind-mounts the volume's directory (here a fake mount records
// it), twice is once, and unpublish of a gone target succeeds.
func TestPublishUnpublish(t *testing.T) {
	p := newPlugin(t, `{}`)
	var mounted [][2]string
	p.mount = func(src, target string) error { mounted = append(mounted, [2]string{src, target}); return nil }
	p.unmount = func(string) error { t.Error("unmount of a target that is not a mount point"); return nil }
	ctx := context.Background()
	target := filepath.Join(t.TempDir(), "pub")
	req := &csipb.NodePublishVolumeRequest{VolumeId: "v1", TargetPath: target,
		VolumeCapability: &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}}}}
	if _, err := p.NodePublishVolume(ctx, req); err != nil {
		t.Fatal(err)
	}
	if len(mounted) != 1 || mounted[0] != [2]string{filepath.Join(p.root, "v1"), target} {
		t.Fatalf("mounts %v", mounted)
	}
	if st, err := os.Stat(filepath.Join(p.root, "v1")); err != nil || !st.IsDir() {
		t.Errorf("volume directory: %v", err)
	}
	bad := &csipb.NodePublishVolumeRequest{VolumeId: "../x", TargetPath: target, VolumeCapability: req.VolumeCapability}
	if _, err := p.NodePublishVolume(ctx, bad); status.Code(err) != codes.InvalidArgument {
		t.Errorf("publish of ../x = %v, want InvalidArgument", err)
	}
	if _, err := p.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("target after unpublish: %v", err)
	}
	if _, err := p.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: "v1", TargetPath: target}); err != nil {
		t.Errorf("second unpublish: %v", err)
	}
}
