//go:build linux

package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"berth.dev/berth/internal/testutil"
)

// BenchmarkStopCalls measures the plugin's own part of a job stop with a
// mount volume (issue 26): NodeUnpublishVolume, NodeUnstageVolume and
// ControllerUnpublishVolume as the client and the servers make them, over
// the plugin's unix socket, each iteration a whole publish and teardown
// (only the three calls timed, medians as metrics). Its floor is the
// unmount system call of a bind mount, measured alone as unmount-ms.
func BenchmarkStopCalls(b *testing.B) {
	testutil.RequireRoot(b, "the node service bind-mounts")
	dir := b.TempDir()
	srv, err := Start(context.Background(), Config{Endpoint: filepath.Join(dir, "csi.sock"), NodeID: "n1", StateDir: filepath.Join(dir, "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	conn, err := grpc.NewClient(srv.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ctrl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	ctx := context.Background()
	c := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "bench", VolumeCapabilities: []*csi.VolumeCapability{c},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		b.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	staging, target := filepath.Join(dir, "staging"), filepath.Join(dir, "pub", "target")
	var unpub, unstage, ctrlUnpub, unmount []time.Duration
	for range b.N {
		pc, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "n1", VolumeCapability: c})
		if err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(staging, 0o755); err != nil {
			b.Fatal(err)
		}
		if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging, VolumeCapability: c,
			PublishContext: pc.GetPublishContext()}); err != nil {
			b.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			b.Fatal(err)
		}
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, StagingTargetPath: staging, TargetPath: target,
			VolumeCapability: c, PublishContext: pc.GetPublishContext()}); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "n1"}); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		unpub, unstage, ctrlUnpub = append(unpub, t1.Sub(t0)), append(unstage, t2.Sub(t1)), append(ctrlUnpub, t3.Sub(t2))

		// The floor: the same bind mount's unmount alone.
		if err := os.MkdirAll(target, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := unix.Mount(staging, target, "", unix.MS_BIND, ""); err != nil {
			b.Fatal(err)
		}
		t4 := time.Now()
		if err := unix.Unmount(target, 0); err != nil {
			b.Fatal(err)
		}
		unmount = append(unmount, time.Since(t4))
		if err := os.Remove(target); err != nil {
			b.Fatal(err)
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(unpub), "NodeUnpublish-ms")
	b.ReportMetric(median(unstage), "NodeUnstage-ms")
	b.ReportMetric(median(ctrlUnpub), "ControllerUnpublish-ms")
	b.ReportMetric(median(unmount), "unmount-ms")
}
