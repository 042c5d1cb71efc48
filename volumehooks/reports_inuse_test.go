package volumehooks

import (
	"context"
	"errors"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// An in-use report of a use just published is queued without waiting for
// its record's write (an fsync on the path from the volume published to
// the task starting): the use's own record makes it again after a
// restart. It is sent at once, and its record's write, held or skipped
// (made after the delivery), leaves nothing behind for the delivered
// report. One carrying a node expansion,
// which only its record knows, still waits for the write.
func TestAnInUseReportIsQueuedWithoutWaitingForItsWrite(t *testing.T) {
	for _, expansion := range []int64{0, 1 << 30} {
		store := &heldReports{memReports: &memReports{recs: map[string]*pb.VolumeReportRecord{}},
			writing: make(chan struct{}, 1), release: make(chan struct{})}
		claims := newFakeClaims()
		// One carrying an expansion is delivered only once its write began:
		// Queue wakes the sender before it writes, and a delivery first
		// would skip the write (nothing left to persist).
		gated := &heldUpdates{fakeClaims: claims, gate: make(chan struct{})}
		if expansion == 0 {
			close(gated.gate)
		}
		rep, err := NewReporter(ReporterConfig{Claims: gated, Store: store, Logger: testutil.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		go rep.Run(ctx)

		inUse := claimReport(volNodeID, "a1", "", "v1")
		inUse.State, inUse.NodeExpandedBytes = pb.ClaimState_CLAIM_STATE_IN_USE, expansion
		queued := make(chan struct{})
		go func() {
			rep.QueueInUse(inUse)
			close(queued)
		}()
		if expansion != 0 {
			select {
			case <-store.writing:
			case <-time.After(volWait):
				t.Fatal("the record of an in-use report carrying a node expansion was never written")
			}
			close(gated.gate)
		}
		claims.waitUpdate(t, "a1", "v1", pb.ClaimState_CLAIM_STATE_IN_USE, false)
		if expansion == 0 {
			// The background write may begin before the delivery (and is
			// held), or after it, and is then skipped: either way
			// QueueInUse has returned, and nothing is left behind below.
			select {
			case <-queued:
			case <-time.After(volWait):
				t.Fatal("QueueInUse of a plain in-use report waited for its record's write")
			}
		} else {
			select {
			case <-queued:
				t.Fatal("an in-use report carrying a node expansion was queued before its record was written")
			default:
			}
		}
		close(store.release)
		<-queued
		testutil.WaitFor(t, volWait, func() error {
			if n, p := store.len(), len(rep.Pending()); n != 0 || p != 0 {
				return errors.New("a delivered report is still persisted or pending")
			}
			return nil
		})
		cancel()
	}
}

// heldUpdates is fakeClaims whose ClientClaimUpdate waits for gate.
type heldUpdates struct {
	*fakeClaims
	gate chan struct{}
}

func (g *heldUpdates) ClientClaimUpdate(ctx context.Context, req *pb.ClientClaimUpdateRequest) (*pb.ClientClaimUpdateResponse, error) {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.fakeClaims.ClientClaimUpdate(ctx, req)
}
