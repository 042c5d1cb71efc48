package server

import (
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// An alloc stopped before its client ran it, reported complete while its
// claim is still releasing on a ready node (a client that reported it
// before its teardown, or whose servers ignored alloc_id), is not
// collected: collected, it would be sent to no client again, and nothing
// would ever report or force the claim off the node (the reaper acts on
// down and fenced nodes only). Once the client reports the claim
// node-detached, GC takes the alloc.
func TestGCKeepsAnAllocHoldingAReleasingClaimOnALiveNode(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	n1 := cc.n1.GetId()
	a := cc.placeWithClaim(t, "web", n1, "data", false)
	if _, err := cc.s.raftApplyResult(ctx10s(t), fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e-stop", JobId: "web",
		Stops: []*pb.AllocStop{{AllocId: a, DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP, DesiredDescription: "job stopped"}}}}); err != nil {
		t.Fatal(err)
	}
	if cs, _ := cc.s.fsm.State().ClaimsByAlloc(nil, a); len(cs) != 1 || cs[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("claims of stopped alloc: %v, want one releasing", cs)
	}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: n1, Updates: []*pb.AllocClientUpdate{
		{AllocId: a, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, ClientDescription: "stopped before the client ran it"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.s.collectGarbage(ctx10s(t), true); err != nil {
		t.Fatal(err)
	}
	if al, _ := cc.s.fsm.State().AllocByID(nil, a); al == nil {
		cs, _ := cc.s.fsm.State().ClaimsByAlloc(nil, a)
		t.Fatalf("alloc %s collected while its claim %v is releasing on ready node %s: nothing will ever report or force it", a, cs, n1)
	}

	if _, err := cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: n1, AllocId: a, VolumeId: "data",
		State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED}); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.s.collectGarbage(ctx10s(t), true); err != nil {
		t.Fatal(err)
	}
	if al, _ := cc.s.fsm.State().AllocByID(nil, a); al != nil {
		cs, _ := cc.s.fsm.State().ClaimsByAlloc(nil, a)
		t.Fatalf("alloc %s kept after its claim was reported node-detached (claims %v)", a, cs)
	}
}
