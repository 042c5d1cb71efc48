package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// expandNode is a hand-written ClientCSI serving NodeExpandVolume only: it
// records each request and answers with answer.
type expandNode struct {
	pb.UnimplementedClientCSIServer
	nodeID string
	mu     sync.Mutex
	reqs   []*csipb.NodeExpandVolumeRequest
	// calls receives each call's volume ID as it arrives.
	calls  chan string
	answer func(ctx context.Context) (int64, error)
	// answerReq, when set, answers instead of answer, seeing the request.
	answerReq func(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (int64, error)
}

func (n *expandNode) NodeExpandVolume(ctx context.Context, req *pb.CSINodeExpandRequest) (*pb.CSINodeExpandResponse, error) {
	if req.GetNodeId() != n.nodeID {
		return nil, status.Errorf(codes.FailedPrecondition, "call for node %s reached node %s", req.GetNodeId(), n.nodeID)
	}
	in := &csipb.NodeExpandVolumeRequest{}
	if err := proto.Unmarshal(req.GetRequest(), in); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	n.mu.Lock()
	n.reqs = append(n.reqs, in)
	n.mu.Unlock()
	n.calls <- req.GetVolumeId()
	var bytes int64
	var err error
	if n.answerReq != nil {
		bytes, err = n.answerReq(ctx, in)
	} else {
		bytes, err = n.answer(ctx)
	}
	if err != nil {
		return nil, status.Errorf(status.Code(err), "node expansion of volume %q (csi plugin %q) on node %s: %s", req.GetVolumeId(), req.GetPluginId(), n.nodeID, status.Convert(err).Message())
	}
	b, err := proto.Marshal(&csipb.NodeExpandVolumeResponse{CapacityBytes: bytes})
	if err != nil {
		return nil, err
	}
	return &pb.CSINodeExpandResponse{Response: b, VolumePath: "/publish/" + req.GetVolumeId()}, nil
}

func (n *expandNode) last() *csipb.NodeExpandVolumeRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reqs[len(n.reqs)-1]
}

// connectExpandNode registers a node named n.nodeID (which becomes its ID)
// with a healthy node instance of "hp" and opens its tunnel to s, serving n.
func connectExpandNode(t *testing.T, tc *testCluster, s *Server, n *expandNode) {
	t.Helper()
	node := testNode(n.nodeID)
	n.nodeID = node.GetId()
	if _, err := tc.register(s, node); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.nodeID,
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0",
			NodeInfo: &pb.CSINodeInfo{Id: "csi-" + n.nodeID, SupportsExpand: true}}}})
	openExpandTunnel(t, s, n)
}

// openExpandTunnel opens n's tunnel to s, serving n.
func openExpandTunnel(t *testing.T, s *Server, n *expandNode) {
	t.Helper()
	pool := testNodePool()
	t.Cleanup(pool.Close)
	c, err := tunnel.Start(tunnel.ClientConfig{
		NodeID:   n.nodeID,
		Servers:  func() []string { return []string{s.cfg.RPCAddr} },
		Conn:     pool.Conn,
		Register: func(r grpc.ServiceRegistrar) { pb.RegisterClientCSIServer(r, n) },
		Backoff:  backoff.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:   testutil.Logger(t).Named(n.nodeID),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitTunnel(t, s, n.nodeID)
}

// claimInUse places an operator claim of volumeID on nodeID and moves it to
// in-use once the attach reconciler readied it, as the node's report does.
func claimInUse(t *testing.T, s *Server, id, volumeID, nodeID string) {
	t.Helper()
	claimReady(t, s, id, volumeID, nodeID)
	if _, err := s.raftApply(ctx10s(t), fsm.ClaimUpdate, &pb.ClaimUpdateCommand{UpdatedAt: 2, Transitions: []*pb.ClaimTransition{
		{ClaimId: id, NodeId: nodeID, State: pb.ClaimState_CLAIM_STATE_IN_USE}}}); err != nil {
		t.Fatal(err)
	}
}

// claimReady places an operator claim of volumeID on nodeID and waits for
// the attach reconciler to ready it: the node has yet to stage it.
func claimReady(t *testing.T, s *Server, id, volumeID, nodeID string) {
	t.Helper()
	claim := &pb.Claim{Id: id, VolumeId: volumeID, Operator: true, NodeId: nodeID, Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
	if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: claim, CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		c, err := s.fsm.State().ClaimByID(nil, id)
		if err != nil || c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			return fmt.Errorf("claim %s: %v (%v)", id, c.GetState(), err)
		}
		return nil
	})
}

// With node_expansion_required, Expand asks every node where the volume is
// in use, with the plugin's new capacity and the claim's capability, and
// records the capacity only after every node answered; a node's error is
// shown for that node, naming it, and the capacity stays as it was; an
// expand again retries and records it.
func TestVolumeExpandOnTheNodesHoldingIt(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, logs := volumeCluster(t, p)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	v := fsVolume("grow")
	v.CapacityBytes = 10 << 30
	v.Capabilities[0].AccessMode = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var failB error
	var failMu sync.Mutex
	a := &expandNode{nodeID: "node-a", calls: make(chan string, 10), answer: func(ctx context.Context) (int64, error) {
		select {
		case <-release:
			return 20 << 30, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	b := &expandNode{nodeID: "node-b", calls: make(chan string, 10), answer: func(context.Context) (int64, error) {
		failMu.Lock()
		defer failMu.Unlock()
		return 0, failB
	}}
	for _, n := range []*expandNode{a, b} {
		connectExpandNode(t, tc, s, n)
	}
	claimInUse(t, s, "ca", "grow", a.nodeID)
	claimInUse(t, s, "cb", "grow", b.nodeID)
	// The answer is sorted by node ID.
	ia, ib := 0, 1
	if a.nodeID > b.nodeID {
		ia, ib = 1, 0
	}

	p.ControllerExpandVolume.Always(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true}, nil)
	type result struct {
		resp *pb.VolumeExpandResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 20 << 30, Secrets: map[string]string{"k": "s"}})
		done <- result{resp, err}
	}()
	for _, n := range []*expandNode{a, b} {
		select {
		case <-n.calls:
		case <-time.After(30 * time.Second):
			t.Fatalf("node %s never got NodeExpandVolume", n.nodeID)
		}
	}
	// node-b answered, node-a has not: nothing recorded yet.
	if got, _ := s.fsm.State().VolumeByID(nil, "grow"); got.GetCapacityBytes() != 10<<30 {
		t.Fatalf("capacity %d recorded before every node answered", got.GetCapacityBytes())
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if ns := r.resp.GetNodes(); len(ns) != 2 || ns[ia].GetNodeId() != a.nodeID || ns[ia].GetCapacityBytes() != 20<<30 || ns[ia].GetError() != "" ||
		ns[ib].GetNodeId() != b.nodeID || ns[ib].GetError() != "" || r.resp.GetRecordedCapacityBytes() != 20<<30 {
		t.Fatalf("expand answered %v", r.resp)
	}
	if got, _ := s.fsm.State().VolumeByID(nil, "grow"); got.GetCapacityBytes() != 20<<30 {
		t.Fatalf("capacity %d after every node expanded, want 20 GiB", got.GetCapacityBytes())
	}
	req := a.last()
	if req.GetVolumeId() != "ext-grow" || req.GetCapacityRange().GetRequiredBytes() != 20<<30 || req.GetSecrets()["k"] != "s" ||
		req.GetVolumeCapability().GetAccessMode().GetMode() != csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER ||
		req.GetVolumeCapability().GetMount().GetFsType() != "ext4" {
		t.Fatalf("node-a got %v", req)
	}

	// node-b fails: shown for node-b, the capacity stays 20 GiB.
	failMu.Lock()
	failB = status.Error(codes.Internal, "resize2fs failed")
	failMu.Unlock()
	p.ControllerExpandVolume.Always(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 30 << 30, NodeExpansionRequired: true}, nil)
	resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 30 << 30})
	if err != nil {
		t.Fatal(err)
	}
	ns := resp.GetNodes()
	if len(ns) != 2 || ns[ia].GetError() != "" || !strings.Contains(ns[ib].GetError(), b.nodeID) || !strings.Contains(ns[ib].GetError(), "resize2fs failed") ||
		!strings.Contains(ns[ib].GetError(), `volume "grow"`) || resp.GetRecordedCapacityBytes() != 20<<30 || resp.GetCapacityBytes() != 30<<30 {
		t.Fatalf("expand with node-b failing answered %v", resp)
	}
	if got, _ := s.fsm.State().VolumeByID(nil, "grow"); got.GetCapacityBytes() != 20<<30 || got.GetNodeExpansionPendingBytes() != 30<<30 ||
		resp.GetNodeExpansionPendingBytes() != 30<<30 {
		t.Fatalf("capacity %d, pending %d recorded though node-b failed, want 20 GiB kept and 30 GiB pending (answer %v)",
			got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes(), resp)
	}

	// Again, node-b well: recorded.
	failMu.Lock()
	failB = nil
	failMu.Unlock()
	if resp, err = vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "grow", CapacityMinBytes: 30 << 30}); err != nil || resp.GetRecordedCapacityBytes() != 30<<30 {
		t.Fatalf("expand again: %v, %v", resp, err)
	}
	if got, _ := s.fsm.State().VolumeByID(nil, "grow"); got.GetCapacityBytes() != 30<<30 || got.GetNodeExpansionPendingBytes() != 0 {
		t.Fatalf("after every node expanded: capacity %d, pending %d; want 30 GiB, none", got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes())
	}
}

// With node_expansion_required and no node holding the volume, nothing is
// asked of a node: the capacity stays and the expansion is pending, for the
// next node that stages the volume.
func TestVolumeExpandWithNoNodeHoldingItLeavesItPending(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	v := fsVolume("idle")
	v.CapacityBytes = 10 << 30
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
		t.Fatal(err)
	}
	p.ControllerExpandVolume.Always(&csipb.ControllerExpandVolumeResponse{CapacityBytes: 20 << 30, NodeExpansionRequired: true}, nil)
	resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "idle", CapacityMinBytes: 20 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetNodes()) != 0 || resp.GetRecordedCapacityBytes() != 10<<30 || resp.GetNodeExpansionPendingBytes() != 20<<30 {
		t.Fatalf("expand answered %v", resp)
	}
	got, _ := s.fsm.State().VolumeByID(nil, "idle")
	if got.GetCapacityBytes() != 10<<30 || got.GetNodeExpansionPendingBytes() != 20<<30 || got.GetRequestedCapacityMinBytes() != 20<<30 {
		t.Fatalf("stored %v", got)
	}
}

// A client's in-use report with node_expanded_bytes records the expansion
// (capacity, pending cleared) once every server is at nodeExpansionSince;
// before, it is left out of the command and the expansion stays pending.
func TestNodeExpansionAtStageRecordedOnceEveryServerKnowsIt(t *testing.T) {
	for _, tc := range []struct {
		version           string
		capacity, pending int64
	}{
		{"0.1.0-dev.3", 10 << 30, 20 << 30},
		{endpoints.NodeExpansionSinceVersion, 20 << 30, 0},
	} {
		t.Run(tc.version, func(t *testing.T) {
			p := csifake.New()
			c, s, _, n, _ := volumeClusterAt(t, p, tc.version)
			v := fsVolume("grow")
			// A plugin with no row: its claims need no controller publish.
			v.PluginId = "nfs"
			v.CapacityBytes, v.NodeExpansionPendingBytes = 10<<30, 20<<30
			if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
				t.Fatal(err)
			}
			claim := &pb.Claim{Id: "c1", VolumeId: "grow", Operator: true, NodeId: n.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
				AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
			if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: claim, CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
			testutil.WaitFor(t, 10*time.Second, func() error {
				c, err := s.fsm.State().ClaimByID(nil, "c1")
				if err != nil || c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
					return fmt.Errorf("claim c1: %v (%v)", c.GetState(), err)
				}
				return nil
			})
			if _, err := pb.NewClaimsClient(c.conn(s)).ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n.GetId(), VolumeId: "grow", ClaimId: "c1",
				State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeExpandedBytes: 20 << 30}); err != nil {
				t.Fatal(err)
			}
			got, _ := s.fsm.State().VolumeByID(nil, "grow")
			if got.GetCapacityBytes() != tc.capacity || got.GetNodeExpansionPendingBytes() != tc.pending {
				t.Fatalf("after the report: capacity %d, pending %d; want %d, %d", got.GetCapacityBytes(), got.GetNodeExpansionPendingBytes(), tc.capacity, tc.pending)
			}
		})
	}
}

// A plugin with no controller service expands with NodeExpandVolume alone
// (CSI), and only when a node instance has EXPAND_VOLUME; otherwise the
// expand is refused naming the volume and the plugin.
func TestVolumeExpandWithANodeOnlyPlugin(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	n := testNode("n2")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	csiPlugins := pb.NewCSIPluginsClient(tc.conn(s))
	updateCSI(t, csiPlugins, &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"nfs": {Healthy: true, NodeInfo: &pb.CSINodeInfo{Id: "csi-n2"}}}})
	v := fsVolume("shared")
	v.PluginId, v.CapacityBytes = "nfs", 1<<30
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "shared", CapacityMinBytes: 2 << 30})
	if status.Code(err) != errcode.Code(endpoints.ErrPluginCannot) || !strings.Contains(err.Error(), `volume "shared"`) ||
		!strings.Contains(err.Error(), `"nfs"`) || !strings.Contains(err.Error(), "EXPAND_VOLUME") {
		t.Fatalf("expand with a node-only plugin that cannot expand: %v", err)
	}
	if n := p.ControllerExpandVolume.Count(); n != 0 {
		t.Fatalf("%d ControllerExpandVolume calls for a plugin without a controller", n)
	}

	updateCSI(t, csiPlugins, &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"nfs": {Healthy: true, NodeInfo: &pb.CSINodeInfo{Id: "csi-n2", SupportsExpand: true}}}})
	resp, err := vols.Expand(ctx10s(t), &pb.VolumeExpandRequest{VolumeId: "shared", CapacityMinBytes: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetNodeExpansionRequired() || resp.GetCapacityBytes() != 2<<30 || resp.GetRecordedCapacityBytes() != 1<<30 || resp.GetNodeExpansionPendingBytes() != 2<<30 {
		t.Fatalf("expand with a node-only plugin, volume held nowhere: %v", resp)
	}
}

// A node expansion reaches the node from the server holding its tunnel and
// through it from another server (CSIRelay), with the node's code and
// message intact; a node connected nowhere is Unavailable naming it.
func TestNodeExpandThroughEitherServer(t *testing.T) {
	tc := newTestCluster(t, 2)
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	var fail error
	var mu sync.Mutex
	n := &expandNode{nodeID: "node-a", calls: make(chan string, 10), answer: func(context.Context) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		return 3 << 30, fail
	}}
	openExpandTunnel(t, a, n)
	if _, ok := b.tunnels.Session("node-a"); ok {
		t.Fatal("the node is connected to b too; the test needs it on a only")
	}
	req := &csipb.NodeExpandVolumeRequest{VolumeId: "ext-v1", CapacityRange: &csipb.CapacityRange{RequiredBytes: 3 << 30}}
	for _, s := range []*Server{a, b} {
		mu.Lock()
		fail = nil
		mu.Unlock()
		resp, path, err := s.csi.NodeExpand(ctx10s(t), "node-a", "hp", "v1", req)
		if err != nil || resp.GetCapacityBytes() != 3<<30 || path != "/publish/v1" {
			t.Fatalf("through %s: %v, %q, %v", s.cfg.Name, resp, path, err)
		}
		if got := n.last(); got.GetVolumeId() != "ext-v1" || got.GetCapacityRange().GetRequiredBytes() != 3<<30 {
			t.Fatalf("through %s the node got %v", s.cfg.Name, got)
		}
		<-n.calls
		mu.Lock()
		fail = status.Error(codes.OutOfRange, "no room")
		mu.Unlock()
		_, _, err = s.csi.NodeExpand(ctx10s(t), "node-a", "hp", "v1", req)
		<-n.calls
		if status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "no room") || !strings.Contains(err.Error(), "node-a") {
			t.Fatalf("through %s: %v, want OutOfRange naming the node", s.cfg.Name, err)
		}
		if s == b && !strings.Contains(err.Error(), "via server "+a.cfg.Name) {
			t.Errorf("through b: %q does not name the server it went through", err)
		}
	}
	_, _, err := b.csi.NodeExpand(ctx10s(t), "nowhere", "hp", "v1", req)
	if errcode.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("node connected nowhere: %v, want Unavailable naming it", err)
	}
}
