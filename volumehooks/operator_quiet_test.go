package volumehooks

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// holdsNoneLister records, per list, the min index asked from and whether
// the follower said it holds no operator claim.
type holdsNoneLister struct {
	*fakeClaims
	mu   sync.Mutex
	asks []holdsNoneAsk
}

type holdsNoneAsk struct {
	minIndex  uint64
	holdsNone bool
}

func (l *holdsNoneLister) ClientClaims(ctx context.Context, req *pb.ClientClaimsRequest) (*pb.ClientClaimsResponse, error) {
	l.mu.Lock()
	l.asks = append(l.asks, holdsNoneAsk{req.GetQuery().GetMinIndex(), req.GetHoldsNone()})
	l.mu.Unlock()
	return l.fakeClaims.ClientClaims(ctx, req)
}

// waitAsk waits for a list asked from at least minIndex and returns it.
func (l *holdsNoneLister) waitAsk(t *testing.T, minIndex uint64) holdsNoneAsk {
	t.Helper()
	var got holdsNoneAsk
	testutil.WaitFor(t, volWait, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, a := range l.asks {
			if a.minIndex >= minIndex {
				got = a
				return nil
			}
		}
		return fmt.Errorf("no list asked from index %d yet (%d asked)", minIndex, len(l.asks))
	})
	return got
}

// The operator-claim follower tells the servers when it holds no operator
// claim (so they can hold back empty lists), and not while it holds one.
func TestOperatorClaimFollowerSaysWhenItHoldsNone(t *testing.T) {
	e := newVolEnv(t, nil)
	lister := &holdsNoneLister{fakeClaims: e.claims}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.hooks.RunOperatorClaims(ctx, lister)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if a := lister.waitAsk(t, 0); !a.holdsNone {
		t.Fatal("the first list, holding nothing, did not say holds_none")
	}

	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_READY)
	e.claims.waitUpdate(t, "c1", volID, pb.ClaimState_CLAIM_STATE_IN_USE, false)
	e.claims.mu.Lock()
	published := e.claims.index
	e.claims.mu.Unlock()
	if a := lister.waitAsk(t, published); a.holdsNone {
		t.Fatalf("a list asked from index %d, with c1 published, said holds_none", a.minIndex)
	}

	e.claims.setOperator("c1", pb.ClaimState_CLAIM_STATE_FREED)
	testutil.WaitFor(t, volWait, func() error {
		if !e.hooks.holdsNoOperatorClaim(true) {
			return fmt.Errorf("c1's use or teardown still held: uses %+v", e.hooks.cfg.Volumes.Uses())
		}
		return nil
	})
	// The next list (any change, or the wait running out) says so again.
	e.claims.setOperator("unrelated", pb.ClaimState_CLAIM_STATE_FREED)
	e.claims.mu.Lock()
	next := e.claims.index
	e.claims.mu.Unlock()
	if a := lister.waitAsk(t, next); !a.holdsNone {
		t.Fatalf("the list asked from index %d, c1 torn down, did not say holds_none", a.minIndex)
	}
}
