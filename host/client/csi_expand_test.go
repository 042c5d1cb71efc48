package client

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// volume expand end to end over a real server and client, with a node-only
// fake plugin that has EXPAND_VOLUME (CSI: the CO calls NodeExpandVolume
// alone): with the alloc's volume published, the server's call reaches the
// plugin through the node's tunnel, the client's ClientCSI and its volume
// manager, with the alloc's target, the staging path and the size; the
// capacity is recorded after the node answered. With the volume held
// nowhere the expansion is pending, and the next alloc's stage makes it.
func TestVolumeExpandReachesTheNodePlugin(t *testing.T) {
	e := newVolumeEnv(t)
	e.fake.NodeGetCapabilities.Always(csifake.NodeCapabilities(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME), nil)
	// Fingerprinted again with the capability.
	e.stop()
	e.start()
	testutil.WaitFor(t, generous, func() error {
		resp, err := pb.NewCSIPluginsClient(e.conn).Get(e.ctx, &pb.CSIPluginGetRequest{PluginId: "fake"})
		if err != nil {
			return err
		}
		for _, n := range resp.GetPlugin().GetNodes() {
			if n.GetNodeInfo().GetSupportsExpand() {
				return nil
			}
		}
		return fmt.Errorf("no node instance with EXPAND_VOLUME yet: %v", resp.GetPlugin())
	})
	job, allocID, _ := e.runJob()
	e.waitClaim(pb.ClaimState_CLAIM_STATE_IN_USE)

	e.fake.NodeExpandVolume.Next(&csipb.NodeExpandVolumeResponse{CapacityBytes: 2 << 30}, nil)
	resp, err := e.vols.Expand(e.ctx, &pb.VolumeExpandRequest{VolumeId: "vol1", CapacityMinBytes: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if ns := resp.GetNodes(); len(ns) != 1 || ns[0].GetNodeId() != e.c.NodeID() || ns[0].GetCapacityBytes() != 2<<30 || ns[0].GetError() != "" ||
		resp.GetRecordedCapacityBytes() != 2<<30 || resp.GetNodeExpansionPendingBytes() != 0 {
		t.Fatalf("expand answered %v", resp)
	}
	got := e.fake.NodeExpandVolume.Last()
	target := filepath.Join(e.dir, "csi", "volumes", "fake", "publish", allocID, "vol1")
	staging := filepath.Join(e.dir, "csi", "volumes", "fake", "staging", "vol1")
	if got.GetVolumeId() != "ext-vol1" || got.GetVolumePath() != target || got.GetStagingTargetPath() != staging ||
		got.GetCapacityRange().GetRequiredBytes() != 2<<30 {
		t.Fatalf("the plugin got %v", got)
	}

	// Held nowhere: pending, then made by the next alloc's stage.
	if _, err := pb.NewJobsClient(e.conn).Deregister(e.ctx, &pb.JobDeregisterRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	e.waitTornDown(1)
	e.waitClaim(pb.ClaimState_CLAIM_STATE_FREED)
	if resp, err = e.vols.Expand(e.ctx, &pb.VolumeExpandRequest{VolumeId: "vol1", CapacityMinBytes: 3 << 30}); err != nil {
		t.Fatal(err)
	}
	if len(resp.GetNodes()) != 0 || resp.GetRecordedCapacityBytes() != 2<<30 || resp.GetNodeExpansionPendingBytes() != 3<<30 {
		t.Fatalf("expand of a volume held nowhere answered %v", resp)
	}
	calls := e.fake.NodeExpandVolume.Count()
	if _, err := pb.NewJobsClient(e.conn).Register(e.ctx, &pb.JobRegisterRequest{Job: job}); err != nil {
		t.Fatal(err)
	}
	e.waitClaim(pb.ClaimState_CLAIM_STATE_IN_USE)
	if n := e.fake.NodeExpandVolume.Count(); n != calls+1 {
		t.Fatalf("%d NodeExpandVolume calls at the stage, want 1", n-calls)
	}
	got = e.fake.NodeExpandVolume.Last()
	if pub := e.fake.NodePublishVolume.Last(); got.GetVolumePath() != pub.GetTargetPath() || got.GetVolumePath() == target ||
		got.GetCapacityRange().GetRequiredBytes() != 3<<30 {
		t.Fatalf("the plugin got %v at the stage", got)
	}
}

// ClientCSI's NodeExpandVolume refuses a call for another node, and
// answers FailedPrecondition on a client without CSI volumes, naming the
// volume, plugin and node.
func TestNodeExpandRefusals(t *testing.T) {
	r := &clientCSI{nodeID: "n1", plugins: func() controllers { return noControllers{} }}
	_, err := r.NodeExpandVolume(t.Context(), &pb.CSINodeExpandRequest{NodeId: "n2", PluginId: "hp", VolumeId: "v1"})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "reached node n1") {
		t.Fatalf("call for another node: %v", err)
	}
	_, err = r.NodeExpandVolume(t.Context(), &pb.CSINodeExpandRequest{NodeId: "n1", PluginId: "hp", VolumeId: "v1"})
	if st := status.Convert(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), `volume "v1"`) ||
		!strings.Contains(st.Message(), `"hp"`) || !strings.Contains(st.Message(), "n1") {
		t.Fatalf("client without volumes: %v", err)
	}
}
