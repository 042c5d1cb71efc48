package volumehooks

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// allocClaims answers ClientClaims with alloc_id as the servers do: the
// alloc's claims, at index (the fake's ClientClaims answers as an older
// server, ignoring alloc_id).
type allocClaims struct {
	mu     sync.Mutex
	claims []*pb.Claim
	index  uint64
	asked  []*pb.ClientClaimsRequest
}

func (a *allocClaims) ClientClaims(_ context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, proto.CloneOf(req))
	out := &pb.ClientClaimsResponse{AllocId: req.GetAllocId(), Meta: &pb.QueryMeta{Index: a.index}}
	for _, c := range a.claims {
		if c.GetAllocId() == req.GetAllocId() {
			out.Claims = append(out.Claims, proto.CloneOf(c))
		}
	}
	// A server answering before the alloc's index once, then caught up.
	a.index = max(a.index, 100)
	return out, nil
}

// An alloc the client never ran, whose volume the node still holds for it
// (a use a client that died mid-publish left): its releasing claim is
// reported node-detached only after the use is unpublished and the volume,
// its last user gone, unstaged. A server answering before the alloc's
// modify index is asked again.
func TestTearDownUnrunUnpublishesBeforeReportingDetached(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_READY))
	if err := e.prerun(false); err != nil {
		t.Fatal(err)
	}
	if e.plugin.NodePublishVolume.Count() != 1 {
		t.Fatalf("publish calls %d, want 1", e.plugin.NodePublishVolume.Count())
	}
	e.claims.set(hookAlloc, claimResp(pb.ClaimState_CLAIM_STATE_RELEASING))
	releasing := claimResp(pb.ClaimState_CLAIM_STATE_RELEASING).GetClaim()
	lister := &allocClaims{claims: []*pb.Claim{releasing}, index: 40}

	released := make(chan struct{})
	e.hooks.TearDownUnrun(context.Background(), lister, hookAlloc, 50, func() {
		if e.plugin.NodeUnstageVolume.Count() != 1 || !e.detachedReported() {
			t.Errorf("released before the unstage and the node-detached report")
		}
		close(released)
	})
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	<-released
	if up, us := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); up != 1 || us != 1 {
		t.Fatalf("node-detached reported after %d unpublish and %d unstage calls, want 1 and 1", up, us)
	}
	lister.mu.Lock()
	defer lister.mu.Unlock()
	if len(lister.asked) != 2 || lister.asked[0].GetQuery().GetMinIndex() != 49 || lister.asked[0].GetNodeId() != volNodeID {
		t.Errorf("asked %v; want twice from min_index 49 (the first answer, at 40, was before the alloc's 50)", lister.asked)
	}
}

// An older server ignores alloc_id and answers the operators' claims, at
// the claims table's index (which may stay below the alloc's for good):
// none of them is torn down or reported for the alloc, the alloc is not
// released (its caller would report it complete, collectable with its
// claim still releasing), the server is asked again only after
// OlderServerWait, and the caller's cancel ends the asking.
func TestTearDownUnrunOnAnOlderServerAsksRarelyAndReleasesNothing(t *testing.T) {
	e := newVolEnv(t, func(c *VolumeConfig) {
		c.RetryStart, c.RetryMax, c.OlderServerWait = time.Millisecond, 5*time.Millisecond, 100*time.Millisecond
	})
	e.claims.setOperator("op-1", pb.ClaimState_CLAIM_STATE_RELEASING)
	o := &olderServer{claims: e.claims, second: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	e.hooks.TearDownUnrun(ctx, o, hookAlloc, 50, func() { t.Errorf("an alloc released on an older server's answer") })
	<-o.second
	if gap := o.gap(); gap < 100*time.Millisecond {
		t.Errorf("an older server asked again after %v, want no sooner than OlderServerWait (100ms)", gap)
	}
	cancel()
	e.hooks.Wait() // ends once cancelled
	pending := e.rep.Pending()
	e.claims.mu.Lock()
	defer e.claims.mu.Unlock()
	if len(pending) != 0 || len(e.claims.updates) != 0 || e.plugin.NodeUnpublishVolume.Count() != 0 {
		t.Errorf("reports queued %v, delivered %v, unpublish calls %d; want none for another server's list", pending, e.claims.updates,
			e.plugin.NodeUnpublishVolume.Count())
	}
}

// olderServer answers ClientClaims as a server from before alloc_id: the
// node's operator claims, at the claims table's index (40, below the
// alloc's 50: the alloc's last change touched no claim). second closes
// on the second ask.
type olderServer struct {
	claims *fakeClaims
	mu     sync.Mutex
	asks   []time.Time
	second chan struct{}
}

func (o *olderServer) ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	o.mu.Lock()
	o.asks = append(o.asks, time.Now())
	if len(o.asks) == 2 {
		close(o.second)
	}
	o.mu.Unlock()
	resp, err := o.claims.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: req.GetNodeId()})
	if err != nil {
		return nil, err
	}
	resp.Meta = &pb.QueryMeta{Index: 40}
	return resp, nil
}

// gap is the time between the first two asks.
func (o *olderServer) gap() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.asks[1].Sub(o.asks[0])
}

// detachedReported reports whether a node-detached report of the alloc's
// use of the volume is queued or delivered.
func (e *volEnv) detachedReported() bool {
	e.claims.mu.Lock()
	reqs := append(e.rep.Pending(), e.claims.updates...)
	e.claims.mu.Unlock()
	for _, r := range reqs {
		if r.GetAllocId() == hookAlloc && r.GetState() == pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			return true
		}
	}
	return false
}
