package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// registerExpandVolume registers a multi-node file-system volume id of
// plugin "hp" at 10 GiB.
func registerExpandVolume(t *testing.T, s *Server, id string) {
	t.Helper()
	v := fsVolume(id)
	v.CapacityBytes = 10 << 30
	v.Capabilities[0].AccessMode = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
		t.Fatal(err)
	}
}

func expandOK(ctx context.Context) (int64, error) { return 20 << 30, nil }

// A node with a claim reserved or ready (and none in use) is still staging
// the volume: it read it before the pending size was set, so it is not
// asked, and even when every node asked expanded it the capacity is not
// recorded: the expansion stays pending for that node's stage to make.
func TestVolumeExpandStaysPendingWhileANodeStagesIt(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	registerExpandVolume(t, s, "grow")
	a := &expandNode{nodeID: "node-a", calls: make(chan string, 10), answer: expandOK}
	b := &expandNode{nodeID: "node-b", calls: make(chan string, 10), answer: expandOK}
	for _, n := range []*expandNode{a, b} {
		connectExpandNode(t, tc, s, n)
	}
	claimInUse(t, s, "ca", "grow", a.nodeID)
	claimReady(t, s, "cb", "grow", b.nodeID)
	p.ControllerExpandVolume.Always(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true}, nil)
	resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 20 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if ns := resp.GetNodes(); len(ns) != 1 || ns[0].GetNodeId() != a.nodeID || ns[0].GetError() != "" {
		t.Fatalf("expand asked %v, want node-a only", ns)
	}
	if got, _ := s.fsm.State().VolumeByID(nil, "grow"); got.GetCapacityBytes() != 10<<30 || got.GetNodeExpansionPendingBytes() != 20<<30 ||
		resp.GetRecordedCapacityBytes() != 10<<30 || resp.GetNodeExpansionPendingBytes() != 20<<30 {
		t.Fatalf("capacity %d, pending %d (answer %v); want 10 GiB kept and 20 GiB pending for node-b's stage",
			got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes(), resp)
	}
	// node-b's stage made it: its in-use report records it.
	if _, err := pb.NewClaimsClient(tc.conn(s)).ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: b.nodeID, VolumeId: "grow", ClaimId: "cb",
		State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeExpandedBytes: 20 << 30}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.fsm.State().VolumeByID(nil, "grow"); got.GetCapacityBytes() != 20<<30 || got.GetNodeExpansionPendingBytes() != 0 {
		t.Fatalf("after node-b's stage: capacity %d, pending %d; want 20 GiB, none", got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes())
	}
}

// A node whose teardown finished answers that it does not hold the volume:
// nothing to expand there, shown as not held and not a failure; the
// capacity is recorded when another node expanded it, and stays pending
// when none did.
func TestVolumeExpandOnANodeNoLongerHoldingIt(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	notHeld := func(context.Context) (int64, error) {
		return 0, errcode.Status(fmt.Errorf("volume %q, node node-a: %w", "grow", volumemanager.ErrNotHeld))
	}
	a := &expandNode{nodeID: "node-a", calls: make(chan string, 10), answer: notHeld}
	b := &expandNode{nodeID: "node-b", calls: make(chan string, 10), answer: expandOK}
	for _, n := range []*expandNode{a, b} {
		connectExpandNode(t, tc, s, n)
	}
	p.ControllerExpandVolume.Always(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true}, nil)
	for _, tt := range []struct {
		volume            string
		nodes             []*expandNode
		capacity, pending int64
	}{
		{"both", []*expandNode{a, b}, 20 << 30, 0},
		{"gone", []*expandNode{a}, 10 << 30, 20 << 30},
	} {
		registerExpandVolume(t, s, tt.volume)
		for _, n := range tt.nodes {
			claimInUse(t, s, tt.volume+"-"+n.nodeID, tt.volume, n.nodeID)
		}
		resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: tt.volume, CapacityMinBytes: 20 << 30})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range resp.GetNodes() {
			if n.GetError() != "" || n.GetNotHeld() != (n.GetNodeId() == a.nodeID) {
				t.Fatalf("volume %s: node %s answered %v", tt.volume, n.GetNodeId(), n)
			}
		}
		if got, _ := s.fsm.State().VolumeByID(nil, tt.volume); len(resp.GetNodes()) != len(tt.nodes) ||
			got.GetCapacityBytes() != tt.capacity || got.GetNodeExpansionPendingBytes() != tt.pending {
			t.Fatalf("volume %s: capacity %d, pending %d (answer %v); want %d, %d", tt.volume, got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes(), resp, tt.capacity, tt.pending)
		}
	}
}

// Two expands of one volume at once: the one recorded second reads the
// volume again and keeps what the first recorded. A pending size above
// what it made is neither lowered (it failed on a node too) nor cleared
// (it completed).
func TestConcurrentVolumeExpandsKeepEachOthersPendingSize(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	release := map[string]chan struct{}{"completes": make(chan struct{}), "fails": make(chan struct{})}
	a := &expandNode{nodeID: "node-a", calls: make(chan string, 10), answerReq: func(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (int64, error) {
		if req.GetCapacityRange().GetRequiredBytes() == 30<<30 {
			return 0, status.Error(codes.Internal, "resize2fs failed")
		}
		select {
		case <-release[strings.TrimPrefix(req.GetVolumeId(), "ext-")]:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if req.GetVolumeId() == "ext-fails" {
			return 0, status.Error(codes.Internal, "resize2fs failed")
		}
		return 20 << 30, nil
	}}
	connectExpandNode(t, tc, s, a)
	for _, tt := range []struct {
		volume            string
		capacity, pending int64
	}{
		// The first expand (to 20 GiB) completes after the second (to 30
		// GiB) failed on the node: 20 GiB recorded, 30 GiB still pending.
		{"completes", 20 << 30, 30 << 30},
		// The first fails after the second: 30 GiB stays pending.
		{"fails", 10 << 30, 30 << 30},
	} {
		registerExpandVolume(t, s, tt.volume)
		claimInUse(t, s, "c-"+tt.volume, tt.volume, a.nodeID)
		p.ControllerExpandVolume.Next(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true}, nil)
		done := make(chan error, 1)
		go func() {
			_, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: tt.volume, CapacityMinBytes: 20 << 30})
			done <- err
		}()
		select {
		case <-a.calls:
		case <-time.After(30 * time.Second):
			t.Fatalf("volume %s: node-a never got the first NodeExpandVolume", tt.volume)
		}
		p.ControllerExpandVolume.Next(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 30 << 30, NodeExpansionRequired: true}, nil)
		resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: tt.volume, CapacityMinBytes: 30 << 30})
		<-a.calls
		if err != nil || resp.GetNodeExpansionPendingBytes() != 30<<30 {
			t.Fatalf("volume %s: second expand: %v, %v", tt.volume, resp, err)
		}
		close(release[tt.volume])
		if err := <-done; err != nil {
			t.Fatalf("volume %s: first expand: %v", tt.volume, err)
		}
		if got, _ := s.fsm.State().VolumeByID(nil, tt.volume); got.GetCapacityBytes() != tt.capacity || got.GetNodeExpansionPendingBytes() != tt.pending {
			t.Fatalf("volume %s: capacity %d, pending %d; want %d, %d", tt.volume, got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes(), tt.capacity, tt.pending)
		}
	}
}

// A plugin whose controller service lacks EXPAND_VOLUME but whose node
// instances have it expands on the nodes alone (CSI lets a plugin expand
// on the controller, the node or both).
func TestVolumeExpandOnTheNodesWhenTheControllerCannot(t *testing.T) {
	p := csifake.New()
	tc, s, vols, n, _ := volumeCluster(t, p)
	csiPlugins := pb.NewCSIPluginsClient(tc.conn(s))
	ctl := &pb.CSIControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true}
	updateCSI(t, csiPlugins, &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0", ControllerRequired: true, ControllerInfo: ctl}},
		Nodes:       map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0"}}})
	registerExpandVolume(t, s, "grow")
	_, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 20 << 30})
	if status.Code(err) != errcode.Code(endpoints.ErrPluginCannot) || !strings.Contains(err.Error(), `volume "grow"`) {
		t.Fatalf("expand with no instance that can expand: %v", err)
	}
	a := &expandNode{nodeID: "node-a", calls: make(chan string, 10), answer: expandOK}
	connectExpandNode(t, tc, s, a)
	claimInUse(t, s, "ca", "grow", a.nodeID)
	resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 20 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if ns := resp.GetNodes(); len(ns) != 1 || ns[0].GetError() != "" || resp.GetRecordedCapacityBytes() != 20<<30 || resp.GetNodeExpansionPendingBytes() != 0 {
		t.Fatalf("node-only expand: %v", resp)
	}
	if c := p.ControllerExpandVolume.Count(); c != 0 {
		t.Fatalf("%d ControllerExpandVolume calls to a controller without EXPAND_VOLUME", c)
	}
}

// A client's node_expanded_bytes is recorded only for the pending
// expansion: with none pending, or above the pending size, it is dropped
// (the capacity stays what the plugin made).
func TestNodeExpandedBytesOnlyForThePendingExpansion(t *testing.T) {
	p := csifake.New()
	c, s, _, n, _ := volumeCluster(t, p)
	for _, tt := range []struct {
		volume                    string
		pending, reported         int64
		wantCapacity, wantPending int64
	}{
		{"none", 0, 20 << 30, 10 << 30, 0},
		{"above", 20 << 30, 40 << 30, 10 << 30, 20 << 30},
		{"pending", 20 << 30, 20 << 30, 20 << 30, 0},
	} {
		v := fsVolume(tt.volume)
		v.PluginId = "nfs"
		v.Capabilities[0].AccessMode = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
		v.CapacityBytes, v.NodeExpansionPendingBytes = 10<<30, tt.pending
		if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
			t.Fatal(err)
		}
		claimReady(t, s, "c-"+tt.volume, tt.volume, n.GetId())
		if _, err := pb.NewClaimsClient(c.conn(s)).ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n.GetId(), VolumeId: tt.volume, ClaimId: "c-" + tt.volume,
			State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeExpandedBytes: tt.reported}); err != nil {
			t.Fatal(err)
		}
		got, _ := s.fsm.State().VolumeByID(nil, tt.volume)
		if cl, _ := s.fsm.State().ClaimByID(nil, "c-"+tt.volume); cl.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE ||
			got.GetCapacityBytes() != tt.wantCapacity || got.GetNodeExpansionPendingBytes() != tt.wantPending {
			t.Fatalf("volume %s: claim %v, capacity %d, pending %d; want in use, %d, %d", tt.volume, cl.GetState(),
				got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes(), tt.wantCapacity, tt.wantPending)
		}
	}
}
