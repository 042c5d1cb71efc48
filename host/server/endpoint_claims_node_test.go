package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// ClientClaims answers a node its operators' claims (not its allocs',
// not another node's), and a blocking call wakes when one is made,
// released and freed.
func TestClientClaimsListsTheNodesOperatorClaims(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	cc.volume(t, "other", snw)
	// An alloc's claim on n1: not an operator's.
	cc.placeWithClaim(t, "web", cc.n1.GetId(), "other", false)

	first, err := cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n1.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetClaims()) != 0 {
		t.Fatalf("claims before any operator claim: %v", first.GetClaims())
	}
	type answer struct {
		resp *pb.ClientClaimsResponse
		err  error
	}
	wait := func(min uint64) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := cc.claims.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: cc.n1.GetId(),
				Query: &pb.QueryOptions{MinIndex: min, MaxWaitMs: 15_000}})
			ch <- answer{r, err}
		}()
		return ch
	}
	woken := wait(first.GetMeta().GetIndex())
	made, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: cc.n1.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	a := <-woken
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.resp.GetClaims()) != 1 || a.resp.GetClaims()[0].GetId() != made.GetClaim().GetId() || len(a.resp.GetClaims()[0].GetVolumeId()) == 0 {
		t.Fatalf("after the claim: %v", a.resp.GetClaims())
	}
	other, err := cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n2.GetId()})
	if err != nil || len(other.GetClaims()) != 0 {
		t.Fatalf("n2's claims: %v, %v", other.GetClaims(), err)
	}

	woken = wait(a.resp.GetMeta().GetIndex())
	if _, err := cc.claims.Release(ctx10s(t), &pb.ClaimReleaseRequest{ClaimId: made.GetClaim().GetId()}); err != nil {
		t.Fatal(err)
	}
	a = <-woken
	if a.err != nil || len(a.resp.GetClaims()) != 1 || a.resp.GetClaims()[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("after the release: %v, %v", a.resp.GetClaims(), a.err)
	}
	woken = wait(a.resp.GetMeta().GetIndex())
	if _, err := cc.claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: cc.n1.GetId(), ClaimId: made.GetClaim().GetId(),
		State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED}); err != nil {
		t.Fatal(err)
	}
	a = <-woken
	if a.err != nil || len(a.resp.GetClaims()) != 0 {
		t.Fatalf("after the claim was freed: %v, %v", a.resp.GetClaims(), a.err)
	}

	_, err = cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: "n1"})
	wantCode(t, "bad node id", err, codes.InvalidArgument, `"n1"`)
}

// With alloc_id, ClientClaims answers the claims that alloc holds on the
// calling node (what a client that never ran a stopped alloc takes down),
// in every state, and nothing to another node or of another alloc; the
// answer echoes alloc_id.
func TestClientClaimsListsAnAllocsClaims(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	cc.volume(t, "other", snw)
	a := cc.placeWithClaim(t, "web", cc.n1.GetId(), "data", false)
	cc.placeWithClaim(t, "api", cc.n1.GetId(), "other", false)
	if _, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "other", NodeId: cc.n1.GetId(),
		Mode: pb.ClaimMode_CLAIM_MODE_READ}); err != nil {
		t.Fatal(err)
	}

	got, err := cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n1.GetId(), AllocId: a})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.GetClaims()) != 1 || got.GetClaims()[0].GetAllocId() != a || got.GetClaims()[0].GetVolumeId() != "data" {
		t.Fatalf("claims of alloc %s on n1: %v; want its claim of data alone", a, got.GetClaims())
	}
	// The answer echoes alloc_id: the client tells it from an older
	// server's, which ignores the field and lists the operators' claims.
	if got.GetAllocId() != a {
		t.Fatalf("answer for alloc %s echoes alloc_id %q; want it", a, got.GetAllocId())
	}
	other, err := cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n2.GetId(), AllocId: a})
	if err != nil || len(other.GetClaims()) != 0 {
		t.Fatalf("claims of alloc %s asked by n2: %v, %v; want none", a, other.GetClaims(), err)
	}
	none, err := cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n1.GetId(), AllocId: "a-unknown"})
	if err != nil || len(none.GetClaims()) != 0 {
		t.Fatalf("claims of an unknown alloc: %v, %v; want none", none.GetClaims(), err)
	}

	// The alloc changes and none of its claims does: a client asking from
	// the alloc's modify index (what it saw) is answered by a server that
	// applied it at once, not after the query's wait (here longer than the
	// call's 10 s deadline).
	if _, err := cc.s.raftApply(ctx10s(t), fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: cc.n1.GetId(), Updates: []*pb.AllocClientUpdate{
		{AllocId: a, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}}); err != nil {
		t.Fatal(err)
	}
	alloc, _ := cc.s.fsm.State().AllocByID(nil, a)
	if c, _ := cc.s.fsm.State().ClaimsByAlloc(nil, a); len(c) != 1 || c[0].GetModifyIndex() >= alloc.GetModifyIndex() {
		t.Fatalf("claims %v changed with alloc %v", c, alloc)
	}
	got, err = cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n1.GetId(), AllocId: a,
		Query: &pb.QueryOptions{MinIndex: alloc.GetModifyIndex() - 1, MaxWaitMs: 60_000}})
	if err != nil || len(got.GetClaims()) != 1 || got.GetMeta().GetIndex() < alloc.GetModifyIndex() {
		t.Fatalf("claims of alloc %s from its modify index %d: %v, %v", a, alloc.GetModifyIndex(), got, err)
	}
}
