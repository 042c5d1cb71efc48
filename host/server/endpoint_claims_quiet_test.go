package server

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

// A node holding no operator claim, whose client says so (holds_none),
// sleeps through claims made on other nodes and wakes for an operator's
// claim on it. A client that does not say so (an older one) is answered as
// before: the first claim change near its node's key wakes it with an
// empty list.
func TestClientClaimsOfANodeHoldingNoneSleepThroughOtherNodesClaims(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	cc.volume(t, "other", snw)
	cc.volume(t, "third", snw)

	first, err := cc.claims.ClientClaims(ctx10s(t), &pb.ClientClaimsRequest{NodeId: cc.n1.GetId(), HoldsNone: true})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		resp *pb.ClientClaimsResponse
		err  error
	}
	wait := func(holdsNone bool) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			r, err := cc.claims.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: cc.n1.GetId(), HoldsNone: holdsNone,
				Query: &pb.QueryOptions{MinIndex: first.GetMeta().GetIndex(), MaxWaitMs: 60_000}})
			ch <- answer{r, err}
		}()
		return ch
	}
	quiet, older := wait(true), wait(false)

	// Claims on the other node only.
	cc.placeWithClaim(t, "web", cc.n2.GetId(), "other", false)
	cc.placeWithClaim(t, "api", cc.n2.GetId(), "third", false)
	a := <-older
	if a.err != nil || len(a.resp.GetClaims()) != 0 {
		t.Fatalf("the older client's list: %v, %v; want it woken with an empty list", a.resp.GetClaims(), a.err)
	}
	select {
	case a := <-quiet:
		t.Fatalf("the list of a node holding none answered for another node's claims: %v, index %d, err %v",
			a.resp.GetClaims(), a.resp.GetMeta().GetIndex(), a.err)
	default:
	}

	// An operator's claim on the node wakes it.
	made, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: cc.n1.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	a = <-quiet
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.resp.GetClaims()) != 1 || a.resp.GetClaims()[0].GetId() != made.GetClaim().GetId() || a.resp.GetMeta().GetIndex() <= first.GetMeta().GetIndex() {
		t.Fatalf("the quiet list answered %v at index %d (first at %d), want the operator's claim at a newer index",
			a.resp.GetClaims(), a.resp.GetMeta().GetIndex(), first.GetMeta().GetIndex())
	}
}
