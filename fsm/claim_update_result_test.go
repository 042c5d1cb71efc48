package fsm_test

import (
	"bytes"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// A ClaimUpdate answers how many of its transitions moved a claim: not
// one that finds its claim gone, already in the state, or a failed try
// (the reaper counts what it forced from it).
func TestClaimUpdateAnswersTheClaimsItMoved(t *testing.T) {
	var logs bytes.Buffer
	f := claimsSeeded(t, &logs)
	applyOK(t, f, 10, fsm.PlanApply, claimPlan("a1", "n1", "c1", "v2"))
	moved := func(index uint64, cmd *pb.ClaimUpdateCommand) int32 {
		t.Helper()
		res := applyAt(f, index, mustEncode(t, fsm.ClaimUpdate, cmd))
		if res.Err != nil {
			t.Fatalf("ClaimUpdate at %d: %v", index, res.Err)
		}
		r, ok := res.Response.(*pb.ClaimUpdateResult)
		if !ok {
			t.Fatalf("ClaimUpdate at %d answered %T, want a *pb.ClaimUpdateResult", index, res.Response)
		}
		return r.GetMoved()
	}
	inUse := &pb.ClaimTransition{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeId: "n1"}
	gone := &pb.ClaimTransition{ClaimId: "gone", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, Force: true}
	if n := moved(11, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{inUse, gone, inUse}, UpdatedAt: 1}); n != 1 {
		t.Errorf("in-use, a gone claim detached, in-use again: moved %d, want 1", n)
	}
	try := &pb.ClaimTransition{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeId: "n1",
		Error: &pb.VolumeError{Message: "publish failed", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN}, Attempts: 1}
	if n := moved(12, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{try}, UpdatedAt: 2}); n != 0 {
		t.Errorf("a failed try: moved %d, want 0", n)
	}
	if c, _ := f.State().ClaimByID(nil, "c1"); c.GetAttempts() != 1 {
		t.Fatalf("claim %v; want the failed try recorded", c)
	}
}
