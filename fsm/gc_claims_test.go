package fsm_test

import (
	"bytes"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// With keep_releasing_claims, GC keeps a complete, stopped alloc whose
// claim is releasing on a live node (only its client reports it off the
// node, and only while the alloc is sent to it), and takes it once the
// node is down (the reaper forces a down node's claims); without the
// field (an older server's rule) it takes it at once. GCCandidates never
// proposes it while it is kept.
func TestGCKeepsAnAllocWithAReleasingClaimOnALiveNode(t *testing.T) {
	for _, keep := range []bool{true, false} {
		var logs bytes.Buffer
		f := claimsSeeded(t, &logs)
		applyOK(t, f, 10, fsm.PlanApply, claimPlan("a1", "n1", "c1", "v2"))
		applyOK(t, f, 11, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e2", JobId: "web",
			Stops: []*pb.AllocStop{{AllocId: "a1", DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP}}}})
		applyOK(t, f, 12, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
			{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}}})
		if c, _ := f.State().ClaimByID(nil, "c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			t.Fatalf("claim %v; want releasing", c)
		}
		if cand, err := f.State().GCCandidates(100, 0); err != nil || len(cand.GetAllocIds()) != 0 {
			t.Fatalf("GC candidates %v, %v; want no alloc holding a releasing claim on a live node", cand, err)
		}
		gc := &pb.GCCommand{AllocIds: []string{"a1"}, KeepReleasingClaims: keep}
		applyOK(t, f, 13, fsm.GC, gc)
		a, _ := f.State().AllocByID(nil, "a1")
		if keep != (a != nil) {
			t.Fatalf("keep_releasing_claims %v: alloc after GC %v", keep, a)
		}
		if !keep {
			continue
		}
		applyOK(t, f, 14, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 9})
		if cand, err := f.State().GCCandidates(100, 0); err != nil || len(cand.GetAllocIds()) != 1 {
			t.Fatalf("GC candidates %v, %v; want the alloc, its node down", cand, err)
		}
		applyOK(t, f, 15, fsm.GC, gc)
		if a, _ := f.State().AllocByID(nil, "a1"); a != nil {
			t.Fatalf("alloc %v kept on a down node: the reaper forces its claim, nothing waits on its client", a)
		}
	}
}
