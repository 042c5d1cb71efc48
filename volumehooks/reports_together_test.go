package volumehooks

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// gatedClaims answers ClientClaimUpdate once open is closed, counting the
// calls in flight at once; alloc failOnce's first report is not delivered.
type gatedClaims struct {
	Claims
	open     chan struct{}
	failOnce string

	mu        sync.Mutex
	inFlight  int
	most      int
	failed    bool
	delivered map[string]int // alloc → in-use reports taken
}

func (c *gatedClaims) ClientClaimUpdate(ctx context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	c.mu.Lock()
	c.inFlight++
	c.most = max(c.most, c.inFlight)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inFlight--
		c.mu.Unlock()
	}()
	select {
	case <-c.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if req.GetAllocId() == c.failOnce && !c.failed {
		c.failed = true
		return nil, status.Error(codes.Unavailable, "no leader")
	}
	c.delivered[req.GetAllocId()]++
	return &pb.ClientClaimUpdateResponse{}, nil
}

func (c *gatedClaims) atOnce() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

// A node's pending reports go to the servers together, not one raft write
// after another: a node with 12 new claims in use sends the 12 at once.
// Each is delivered exactly once; the one the servers did not take is
// tried again and delivered, none is lost, and nothing stays persisted.
func TestANodesReportsAreSentTogether(t *testing.T) {
	const n = 12
	claims := &gatedClaims{open: make(chan struct{}), failOnce: "a03", delivered: map[string]int{}}
	store := &memReports{recs: map[string]*pb.VolumeReportRecord{}}
	rep, err := NewReporter(ReporterConfig{Claims: claims, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		req := claimReport(volNodeID, fmt.Sprintf("a%02d", i), "", fmt.Sprintf("v%02d", i))
		req.State = pb.ClaimState_CLAIM_STATE_IN_USE
		rep.Queue(req)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testutil.WaitFor(t, volWait, func() error {
		if m := claims.atOnce(); m < n {
			return fmt.Errorf("%d reports sent at once, want all %d", m, n)
		}
		return nil
	})
	close(claims.open)
	testutil.WaitFor(t, volWait, func() error {
		if p := rep.Pending(); len(p) != 0 || store.len() != 0 {
			return fmt.Errorf("%d reports pending, %d persisted", len(p), store.len())
		}
		return nil
	})
	claims.mu.Lock()
	defer claims.mu.Unlock()
	for i := range n {
		if a := fmt.Sprintf("a%02d", i); claims.delivered[a] != 1 {
			t.Errorf("alloc %s's in-use report delivered %d times, want once", a, claims.delivered[a])
		}
	}
}
