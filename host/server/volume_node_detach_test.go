package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// detachNode is a hand-written ClientCSI answering NodeDetachVolume as a
// client that took down what it held of the volume: it records the calls
// and answers per listed user — done for the allocs it was told it held,
// failed for the claims in fail, not held for the others — or with answer
// when set.
type detachNode struct {
	pb.UnimplementedClientCSIServer
	mu     sync.Mutex
	calls  []*pb.CSINodeDetachRequest
	allocs []string
	fail   map[string]string
	answer error
}

func (n *detachNode) NodeDetachVolume(_ context.Context, req *pb.CSINodeDetachRequest) (*pb.CSINodeDetachResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.calls = append(n.calls, req)
	if n.answer != nil {
		return nil, n.answer
	}
	resp := &pb.CSINodeDetachResponse{PluginId: "ebs", Unstaged: true}
	for _, u := range req.GetUsers() {
		r := &pb.CSINodeDetachResult{User: u, Outcome: pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_NOT_HELD}
		switch {
		case n.fail[u.GetClaimId()] != "":
			r.Outcome, r.Error = pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_FAILED, n.fail[u.GetClaimId()]
		case slices.Contains(n.allocs, u.GetAllocId()):
			r.Outcome = pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_DONE
			resp.AllocIds = append(resp.AllocIds, u.GetAllocId())
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (n *detachNode) set(f func(n *detachNode)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

func (n *detachNode) lastCall() *pb.CSINodeDetachRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.calls[len(n.calls)-1]
}

func (n *detachNode) callCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.calls)
}

// connectDetachNode opens nodeID's tunnel to s, serving node.
func connectDetachNode(t *testing.T, s *Server, nodeID string, node pb.ClientCSIServer) {
	t.Helper()
	pool := testNodePool()
	t.Cleanup(pool.Close)
	c, err := tunnel.Start(tunnel.ClientConfig{
		NodeID:   nodeID,
		Servers:  func() []string { return []string{s.cfg.RPCAddr} },
		Conn:     pool.Conn,
		Register: func(r grpc.ServiceRegistrar) { pb.RegisterClientCSIServer(r, node) },
		Backoff:  backoff.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:   testutil.Logger(t).Named("node"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	waitTunnel(t, s, nodeID)
}

// TestVolumeDetach: `volume detach` of a volume an alloc that is not
// terminal claims on the node is refused, naming the volume, the node and
// the alloc, and calls no node; an operator's claim not released refuses
// it too. Once the job is stopped (its claim releasing, the attachment
// still attached), the detach reaches the node through the server that
// holds its tunnel (a follower: the leader relays), the claim is recorded
// node-detached through raft (the answer shows it so, unless the
// controller unpublish already freed it), and the attach reconciler's
// controller unpublish, not made before, frees it.
func TestVolumeDetach(t *testing.T) {
	fake := volumetest.NewController()
	tc := newTestCluster(t, 2, withVersion(version.Version), withController(fake), func(c *testConfig) { c.NumSchedulers = 1 })
	leader := tc.waitLeader()
	waitMembers(t, leader, 2)
	n1 := workNode("n1")
	if _, err := tc.register(leader, n1); err != nil {
		t.Fatal(err)
	}
	nodeID := n1.GetId()
	if _, err := leader.raftApply(ctx10s(t), fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: nodeID,
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSController(true)},
		Nodes:       map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSNode("n1")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{
		Id: "vol1", Name: "vol1", PluginId: "ebs", ExternalId: "ext-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
	}, RegisteredAt: 1}); err != nil {
		t.Fatal(err)
	}
	var follower *Server
	for _, s := range tc.followers(leader) {
		follower = s
	}
	node := &detachNode{}
	connectDetachNode(t, follower, nodeID, node)

	jobs, volumes := pb.NewJobsClient(tc.conn(leader)), pb.NewVolumesClient(tc.conn(follower))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("a", 1)}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocs(t, tc, leader, "a", 1, nil)[0].GetId()
	node.allocs = []string{alloc}
	testutil.WaitFor(t, 15*time.Second, func() error {
		att, err := leader.State().Attachment(nil, "vol1", nodeID)
		if err != nil || att.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
			return fmt.Errorf("attachment of vol1 to n1: %v (%v), want attached", att, err)
		}
		return nil
	})

	refused := func(want ...string) {
		t.Helper()
		_, err := volumes.Detach(ctx10s(t), &pb.VolumeDetachRequest{VolumeId: "vol1", NodeId: nodeID})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("detach while in use: %v, want FailedPrecondition", err)
		}
		for _, w := range append(want, `volume "vol1"`, nodeID, "in use on the node") {
			if !strings.Contains(status.Convert(err).Message(), w) {
				t.Fatalf("detach refused with %q, want it to name %q", status.Convert(err).Message(), w)
			}
		}
		if n := node.callCount(); n != 0 {
			t.Fatalf("a refused detach called the node %d times", n)
		}
	}
	refused("alloc " + alloc)

	// A node with no tunnel to any server cannot be asked: Unavailable,
	// naming it.
	n2 := workNode("n2")
	if _, err := tc.register(leader, n2); err != nil {
		t.Fatal(err)
	}
	_, err := volumes.Detach(ctx10s(t), &pb.VolumeDetachRequest{VolumeId: "vol1", NodeId: n2.GetId()})
	if msg := status.Convert(err).Message(); status.Code(err) != codes.Unavailable || !strings.Contains(msg, n2.GetId()) ||
		strings.Count(msg, "detaching volume") != 1 || strings.Contains(msg, "rpc error") {
		t.Fatalf("detach from a node not connected: %v, want Unavailable naming it, said once, with no rpc error wrapper", err)
	}
	if _, err := volumes.Detach(ctx10s(t), &pb.VolumeDetachRequest{VolumeId: "vol1", NodeId: "5e0c8f5e-0000-4000-8000-00000000ffff"}); status.Code(err) != codes.NotFound {
		t.Fatalf("detach from an unknown node: %v, want NotFound", err)
	}

	// An operator's claim (read, beside the writer) refuses it too, until
	// released.
	if _, err := leader.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{
		Id: "op1", VolumeId: "vol1", NodeId: nodeID, Mode: pb.ClaimMode_CLAIM_MODE_READ, Operator: true,
		AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "a"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		cs, err := leader.State().ClaimsByAlloc(nil, alloc)
		if err != nil || len(cs) != 1 || cs[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			return fmt.Errorf("claims of the stopped alloc: %v (%v), want one releasing", cs, err)
		}
		return nil
	})
	refused(`operator claim "op1"`)
	if _, err := leader.raftApply(ctx10s(t), fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "op1"}); err != nil {
		t.Fatal(err)
	}
	// Stopped by the servers but not reported ended by its client (its
	// tasks may still run until their kill_timeout): refused as stopping.
	refused("alloc "+alloc, "stopping")
	if _, err := leader.raftApply(ctx10s(t), fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: nodeID,
		Updates: []*pb.AllocClientUpdate{{AllocId: alloc, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}}); err != nil {
		t.Fatal(err)
	}

	// The node's own DeadlineExceeded (its teardown outlasted the call)
	// is its answer: not tried again, passed on with its code and its
	// message, not wrapped again.
	nodeMsg := fmt.Sprintf("detaching volume %q from node %s: teardown of alloc %s: still under way, going on in the background: context deadline exceeded", "vol1", nodeID, alloc)
	node.set(func(n *detachNode) { n.answer = status.Error(codes.DeadlineExceeded, nodeMsg) })
	_, err = volumes.Detach(ctx10s(t), &pb.VolumeDetachRequest{VolumeId: "vol1", NodeId: nodeID})
	if status.Code(err) != codes.DeadlineExceeded || status.Convert(err).Message() != nodeMsg {
		t.Fatalf("detach the node answered DeadlineExceeded: %v, want its code and exactly its message %q", err, nodeMsg)
	}
	if n := node.callCount(); n != 1 {
		t.Fatalf("the node's DeadlineExceeded was tried %d times, want once", n)
	}
	// One user failing on the node leaves its claim releasing; the one the
	// node took down is moved on.
	node.set(func(n *detachNode) {
		n.answer, n.calls = nil, nil
		n.fail = map[string]string{"op1": `detaching volume "vol1": teardown of operator claim op1: device busy`}
	})
	resp, err := volumes.Detach(ctx10s(t), &pb.VolumeDetachRequest{VolumeId: "vol1", NodeId: nodeID})
	if err != nil {
		t.Fatalf("detach with one user failing: %v", err)
	}
	if users := node.lastCall().GetUsers(); len(users) != 2 {
		t.Fatalf("node was sent users %v, want the alloc's claim and op1 (both releasing)", users)
	}
	if op, _ := leader.State().ClaimByID(nil, "op1"); op.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("claim op1 the node failed to take down is %v, want still releasing", op)
	}
	if c, _ := leader.State().ClaimsByAlloc(nil, alloc); len(c) == 1 && c[0].GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		t.Fatalf("claim of alloc %s the node took down: %v, want node-detached (or freed)", alloc, c)
	}
	if rs := resp.GetNode().GetResults(); len(rs) != 2 {
		t.Fatalf("node results %v, want two", rs)
	}
	node.set(func(n *detachNode) { n.fail, n.calls = nil, nil })

	// Releasing claims keep the controller publish until their node's
	// word: nothing unpublished yet.
	if un := fake.CallsOf(volumetest.UnpublishMethod); len(un) != 0 {
		t.Fatalf("controller unpublishes %s before the detach, want none", volumetest.DescribeCalls(un))
	}
	resp, err = volumes.Detach(ctx10s(t), &pb.VolumeDetachRequest{VolumeId: "vol1", NodeId: nodeID})
	if err != nil {
		t.Fatalf("detach once the job stopped: %v", err)
	}
	if n := node.callCount(); n != 1 || node.calls[0].GetVolumeId() != "vol1" || node.calls[0].GetNodeId() != nodeID {
		t.Fatalf("node calls %v, want one NodeDetachVolume of vol1 for n1", node.calls)
	}
	if users := node.calls[0].GetUsers(); len(users) != 1 || users[0].GetClaimId() != "op1" || users[0].GetAllocId() != "" {
		t.Fatalf("node was sent users %v, want op1 alone (the alloc's claim is node-detached)", users)
	}
	for _, c := range resp.GetClaims() {
		if c.GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			t.Fatalf("claims after the detach %v, want node-detached (or freed)", resp.GetClaims())
		}
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		cs, err := leader.State().ClaimsByVolume(nil, "vol1")
		if err != nil || len(cs) != 0 {
			return fmt.Errorf("claims of vol1: %v (%v), want none", cs, err)
		}
		att, err := leader.State().Attachment(nil, "vol1", nodeID)
		if err != nil || att != nil {
			return fmt.Errorf("attachment of vol1 to n1: %v (%v), want none", att, err)
		}
		return nil
	})
	if un := fake.CallsOf(volumetest.UnpublishMethod); len(un) != 1 {
		t.Fatalf("controller unpublishes %s, want one", volumetest.DescribeCalls(un))
	}
}
