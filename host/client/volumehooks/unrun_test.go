package volumehooks

import (
	"context"
	"sync"
	"testing"

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
	out := &pb.ClientClaimsResponse{Meta: &pb.QueryMeta{Index: a.index}}
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

	e.hooks.TearDownUnrun(context.Background(), lister, hookAlloc, 50)
	e.claims.waitUpdate(t, hookAlloc, volID, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, false)
	if up, us := e.plugin.NodeUnpublishVolume.Count(), e.plugin.NodeUnstageVolume.Count(); up != 1 || us != 1 {
		t.Fatalf("node-detached reported after %d unpublish and %d unstage calls, want 1 and 1", up, us)
	}
	lister.mu.Lock()
	defer lister.mu.Unlock()
	if len(lister.asked) != 2 || lister.asked[0].GetQuery().GetMinIndex() != 49 || lister.asked[0].GetNodeId() != volNodeID {
		t.Errorf("asked %v; want twice from min_index 49 (the first answer, at 40, was before the alloc's 50)", lister.asked)
	}
}

// An older server ignores alloc_id and answers the operators' claims:
// none of them is torn down or reported for the alloc.
func TestTearDownUnrunIgnoresAnOlderServersOperatorClaims(t *testing.T) {
	e := newVolEnv(t, nil)
	e.claims.setOperator("op-1", pb.ClaimState_CLAIM_STATE_RELEASING)
	e.hooks.TearDownUnrun(context.Background(), e.claims, hookAlloc, 5)
	e.hooks.Wait() // the teardowns it started, and the reports they queued, are done
	pending := e.rep.Pending()
	e.claims.mu.Lock()
	defer e.claims.mu.Unlock()
	if len(pending) != 0 || len(e.claims.updates) != 0 || e.plugin.NodeUnpublishVolume.Count() != 0 {
		t.Errorf("reports queued %v, delivered %v, unpublish calls %d; want none for another server's list", pending, e.claims.updates,
			e.plugin.NodeUnpublishVolume.Count())
	}
}
