package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

var _ volumeStore = (*state.DB)(nil)

// The whole client side against a real server: a job whose group asks for
// a CSI volume is placed with its claim; the client stages and publishes
// it through the node plugin, the raw_exec task sees its publish path in
// BERTH_VOLUME_DATA, and the claim is in use. Stopped, the alloc's volume
// is unpublished and unstaged, the client reports node-detached, and the
// claim is freed (the plugin needs no controller publish).
func TestAllocWithACSIVolumeEndToEnd(t *testing.T) {
	s := startServer(t)
	addr := serverRPC(t, s)
	pool := rpc.NewPool()
	t.Cleanup(pool.Close)
	conn, err := pool.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "csiv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	// A node plugin that needs no controller (no attach step) and stages.
	fake := csifake.New()
	fake.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{}, nil)
	srv, err := fake.Listen(filepath.Join(sockDir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	db, m := driversFor(t, dir)
	c, reg := csiNode(t, dir, addr, db, m, "client")
	t.Cleanup(c.Shutdown)
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	// What the supervisor hook does for a healthy plugin task.
	if err := reg.Register(&pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, PluginId: "fake", AllocId: uuid.Generate(),
		Endpoint: srv.Endpoint, Provider: csifake.Name, ProviderVersion: csifake.VendorVersion, Healthy: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	testutil.WaitFor(t, generous, func() error {
		resp, err := pb.NewCSIPluginsClient(conn).Get(ctx, &pb.CSIPluginGetRequest{PluginId: "fake"})
		if err != nil {
			return err
		}
		if !resp.GetPlugin().GetSchedulable() {
			return fmt.Errorf("plugin not schedulable yet: %v", resp.GetPlugin())
		}
		return nil
	})
	vols := pb.NewVolumesClient(conn)
	if _, err := vols.Register(ctx, &pb.VolumeRegisterRequest{Volume: &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "fake", ExternalId: "ext-vol1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}}); err != nil {
		t.Fatal(err)
	}

	task := &pb.Task{Name: "web", Driver: "raw_exec", KillTimeoutMs: 2000, Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64},
		VolumeMounts: []*pb.VolumeMount{{Volume: "data", Destination: "/data"}},
		Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"),
			"args": sdk.ListValue("-c", `echo "$BERTH_VOLUME_DATA" > "$BERTH_ALLOC_DIR/volume.txt"; while true; do sleep 0.05; done`)}}
	job := mockJob(pb.JobType_JOB_TYPE_SERVICE, task)
	job.Groups[0].Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "vol1",
		AccessMode: "single-node-writer", AttachmentMode: "file-system"}}
	if _, err := pb.NewJobsClient(conn).Register(ctx, &pb.JobRegisterRequest{Job: job}); err != nil {
		t.Fatal(err)
	}
	var allocID string
	var seen string
	testutil.WaitFor(t, generous, func() error {
		for id := range c.knownAllocs() {
			r, err := c.runner(id)
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(r.Dir().Shared, "volume.txt"))
			if err != nil {
				return fmt.Errorf("the task has not written its volume path yet: %w", err)
			}
			allocID, seen = id, strings.TrimSpace(string(b))
			return nil
		}
		return errors.New("no alloc yet")
	})
	if want := filepath.Join(dir, "csi", "publish", allocID, "vol1"); seen != want {
		t.Fatalf("the task saw BERTH_VOLUME_DATA=%q, want %q", seen, want)
	}
	if st, pu := fake.NodeStageVolume.Count(), fake.NodePublishVolume.Count(); st != 1 || pu != 1 {
		t.Fatalf("stage %d, publish %d; want 1 and 1", st, pu)
	}
	claimState := func() (pb.ClaimState, int, error) {
		resp, err := vols.Claims(ctx, &pb.VolumeClaimsRequest{VolumeId: "vol1"})
		if err != nil {
			return 0, 0, err
		}
		if len(resp.GetClaims()) == 0 {
			return pb.ClaimState_CLAIM_STATE_FREED, 0, nil
		}
		return resp.GetClaims()[0].GetState(), len(resp.GetClaims()), nil
	}
	testutil.WaitFor(t, generous, func() error {
		st, n, err := claimState()
		if err != nil || st != pb.ClaimState_CLAIM_STATE_IN_USE || n != 1 {
			return fmt.Errorf("claims: %d, first %s (%v); want one in use", n, st, err)
		}
		return nil
	})

	if _, err := pb.NewJobsClient(conn).Deregister(ctx, &pb.JobDeregisterRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, generous, func() error {
		if up, us := fake.NodeUnpublishVolume.Count(), fake.NodeUnstageVolume.Count(); up != 1 || us != 1 {
			return fmt.Errorf("unpublish %d, unstage %d", up, us)
		}
		st, n, err := claimState()
		if err != nil || n != 0 {
			return fmt.Errorf("claims: %d, first %s (%v); want the claim freed", n, st, err)
		}
		return nil
	})
	if got := fake.NodeUnpublishVolume.Last().GetTargetPath(); got != filepath.Join(dir, "csi", "volumes", "fake", "publish", allocID, "vol1") {
		t.Errorf("unpublished target %q", got)
	}
	if usages, err := db.VolumeUsages(); err != nil || len(usages) != 0 {
		t.Errorf("volume usage left in the state DB: %v, %v", usages, err)
	}
	testutil.WaitFor(t, generous, func() error {
		if reps, err := db.VolumeReports(); err != nil || len(reps) != 0 {
			return fmt.Errorf("reports still queued: %v, %v", reps, err)
		}
		return nil
	})
}
