package client

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// heldTimer is a hold the test fires by hand; Stop reports the call
// already ran (the race the test makes: the timer fired, its callback
// not yet run).
type heldTimer struct {
	mu      sync.Mutex
	f       func()
	stopped bool
}

func (h *heldTimer) Stop() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	return false
}

func (h *heldTimer) wasStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// A hold whose timer fired but whose callback ran only after a send ended
// that hold and a newer one was armed neither sends the newer hold's
// updates early nor leaves the newer hold unstoppable.
func TestUpdaterStaleHoldLeavesTheNewerOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		var timers []*heldTimer
		u.afterFunc = func(_ time.Duration, fn func()) clock.Timer {
			h := &heldTimer{f: fn}
			timers = append(timers, h)
			return h
		}
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		// The first hold's timer fires now, but its callback waits; a
		// running update sends meanwhile and that send completes.
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		synctest.Wait()
		f.release <- nil
		synctest.Wait()
		// A new pending update arms a second hold.
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		if len(timers) != 2 {
			t.Fatalf("%d holds armed, want 2", len(timers))
		}
		// The first hold's callback runs at last.
		timers[0].f()
		synctest.Wait()
		want := [][]string{{"a@running"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			f.release <- nil // the early send, so the bubble can end
			t.Fatalf("batches %v, want %v: the stale hold sent the newer one's updates", got, want)
		}
		// A running update of another alloc goes at once and stops the
		// second hold's timer; b, not yet due, stays held (a third timer).
		u.add(statusUp("c", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		synctest.Wait()
		if !timers[1].wasStopped() {
			t.Errorf("the second hold was not stopped by the send")
		}
		want = append(want, []string{"c@running"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		f.release <- nil
		// The second hold's callback, run late, sends nothing; the wait
		// armed after c's send is the one that will send b.
		timers[1].f()
		synctest.Wait()
		if got := f.sent(); len(got) != 2 {
			t.Fatalf("batches %v, want the two", got)
		}
		if len(timers) != 3 {
			t.Fatalf("%d waits armed, want 3 (b still held)", len(timers))
		}
		time.Sleep(pendingHold)
		timers[2].f()
		synctest.Wait()
		want = append(want, []string{"b@pending"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		f.release <- nil
	})
}
