package server

import (
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// A node can learn of its claim from a follower that applied the plan
// before the leader did: raft commits an entry, then each server applies
// it on its own. The node's in-use report then reaches a leader whose
// state does not hold the claim yet; answered NotFound, the node dropped
// the report for good and the claim stayed ready under a running alloc
// (1 of 1,000 in a nodesim run). The leader reads again after a barrier,
// and records the report.
func TestAReportOnAClaimTheLeaderHasNotAppliedYetIsRecorded(t *testing.T) {
	var (
		armed     atomic.Bool
		held      = make(chan struct{})
		release   = make(chan struct{})
		barriered = make(chan struct{}, 1)
	)
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) {
		c.controllerCaller = heldCaller{}
		c.hooks = &testHooks{
			beforeApply: func(logs []*raft.Log) {
				for _, l := range logs {
					if l.Type == raft.LogCommand && fsm.PeekType(l.Data) == fsm.PlanApply && armed.CompareAndSwap(true, false) {
						close(held)
						<-release // committed, not applied here yet
					}
				}
			},
			barrier: func() {
				select {
				case barriered <- struct{}{}:
				default:
				}
			},
		}
	})
	s := tc.waitLeader()
	cc := &claimCluster{tc: tc, s: s, n1: testNode("n1"), claims: pb.NewClaimsClient(tc.conn(s))}
	cc.n1.Resources = &pb.NodeResources{CpuMhz: 4000, MemoryMb: 4096}
	if _, err := tc.register(s, cc.n1); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: cc.n1.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, NodeInfo: &pb.CSINodeInfo{Id: "csi-n1"}}}})
	cc.volume(t, "data", snw)
	j := serviceJob("web", 1)
	j.Groups[0].Volumes = map[string]*pb.VolumeRequest{"store": {Name: "store", Type: "csi", Source: "data"}}
	if _, err := s.raftApply(ctx10s(t), fsm.JobRegister, &pb.JobRegisterCommand{Job: j}); err != nil {
		t.Fatal(err)
	}
	stored, _ := s.fsm.State().JobByID(nil, "web")
	const alloc = "a-web"
	armed.Store(true)
	planned := make(chan error, 1)
	go func() {
		_, err := s.raftApplyResult(ctx10s(t), fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e-web", JobId: "web",
			JobVersion: stored.GetVersion(),
			Allocs: []*pb.Allocation{{Id: alloc, Name: "web.g[0]", NodeId: cc.n1.GetId(), JobId: "web", JobVersion: stored.GetVersion(),
				TaskGroup: "g", DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
				ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING, Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
			Claims: []*pb.Claim{{Id: "claim-" + alloc, VolumeId: "data", AllocId: alloc, NodeId: cc.n1.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
				AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}})
		planned <- err
	}()
	<-held
	type answer struct {
		resp *pb.ClientClaimUpdateResponse
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: cc.n1.GetId(), AllocId: alloc,
			VolumeId: "data", State: pb.ClaimState_CLAIM_STATE_IN_USE})
		answered <- answer{resp, err}
	}()
	select {
	case <-barriered:
		close(release)
	case a := <-answered:
		close(release)
		t.Fatalf("the in-use report was answered before the leader applied the plan: %v, %v", a.resp, a.err)
	}
	if err := <-planned; err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil || a.resp.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_IN_USE {
		t.Fatalf("in-use report: %v, %v", a.resp, a.err)
	}
	if c, _ := s.fsm.State().ClaimByID(nil, "claim-"+alloc); c.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE {
		t.Fatalf("claim after the report: %v", c)
	}
}
