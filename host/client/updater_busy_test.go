package client

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// startingUp is the pending update of an alloc none of whose tasks has
// started.
func startingUp(id string) *pb.AllocClientUpdate {
	return &pb.AllocClientUpdate{AllocId: id, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING, ClientDescription: "pending",
		TaskStates: map[string]*pb.TaskState{"web": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING}}}
}

// sentAfter waits until the updater sent n batches and returns how long
// after since that took (to the millisecond the tests' times are a
// multiple of); it fails the test if more than n were sent.
func sentAfter(t *testing.T, f *fakeSend, n int, since time.Time) time.Duration {
	t.Helper()
	for synctest.Wait(); len(f.sent()) < n; synctest.Wait() {
		time.Sleep(time.Millisecond)
	}
	if got := f.sent(); len(got) != n {
		t.Fatalf("batches %v, want %d", got, n)
	}
	return time.Since(since)
}

// A starting alloc's pending update waits the short startHold while the
// servers answer the client's sends quickly, and the long busyStartHold
// after a send that took longer than startHold or failed; a quick send
// again brings back the short hold for the next alloc.
func TestUpdaterStartingHoldIsShortUnlessTheServersAreBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold, u.startHold, u.busyStartHold = pendingHold, startingHold, busyStartingHold
		u.sleep = func(context.Context, time.Duration) { time.Sleep(100 * time.Millisecond) }

		// Quiet servers (nothing sent yet): the short hold.
		start := time.Now()
		u.add(startingUp("a"))
		if d := sentAfter(t, f, 1, start); d != startingHold {
			t.Fatalf("quiet: a's pending sent after %s, want %s", d, startingHold)
		}
		time.Sleep(startingHold / 2) // a send quicker than the short hold
		f.release <- nil
		synctest.Wait()
		start = time.Now()
		u.add(startingUp("b"))
		if d := sentAfter(t, f, 2, start); d != startingHold {
			t.Fatalf("after a quick send: b's pending sent after %s, want %s", d, startingHold)
		}

		// A send slower than the short hold: the long one.
		time.Sleep(2 * startingHold)
		f.release <- nil
		synctest.Wait()
		start = time.Now()
		u.add(startingUp("c"))
		if d := sentAfter(t, f, 3, start); d != busyStartingHold {
			t.Fatalf("after a slow send: c's pending sent after %s, want %s", d, busyStartingHold)
		}
		f.release <- nil // quick: quiet again
		synctest.Wait()
		start = time.Now()
		u.add(startingUp("d"))
		if d := sentAfter(t, f, 4, start); d != startingHold {
			t.Fatalf("after a quick send again: d's pending sent after %s, want %s", d, startingHold)
		}
		f.release <- nil

		// A failed send (retried after its backoff): the long one, kept
		// by the wait armed even though the retry is quick.
		u.add(statusUp("x", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		sentAfter(t, f, 5, time.Now())
		f.release <- errors.New("servers unreachable")
		synctest.Wait()
		start = time.Now()
		u.add(startingUp("e"))
		sentAfter(t, f, 6, start) // x's retry, alone
		f.release <- nil
		if d := sentAfter(t, f, 7, start); d != busyStartingHold {
			t.Fatalf("after a failed send: e's pending sent after %s, want %s", d, busyStartingHold)
		}
		f.release <- nil
		want := [][]string{{"a@pending"}, {"b@pending"}, {"c@pending"}, {"d@pending"}, {"x@running"}, {"x@running"}, {"e@pending"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// A send that fails while another alloc's update is held: the held update
// rides with neither the failed send nor its retry, and goes at its own
// deadline. A backoff that outlasts the hold sends nothing meanwhile: the
// held update, due by then, goes with the retry.
func TestUpdaterFailedSendLeavesAHeldUpdateToItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		backoff := pendingHold / 5
		u.sleep = func(context.Context, time.Duration) { time.Sleep(backoff) }
		pending, running := pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING

		start := time.Now()
		u.add(statusUp("h", pending))
		u.add(statusUp("x", running))
		sentAfter(t, f, 1, start)
		f.release <- errors.New("servers unreachable")
		if d := sentAfter(t, f, 2, start); d != backoff {
			t.Fatalf("retry after %s, want the backoff %s", d, backoff)
		}
		f.release <- nil
		if d := sentAfter(t, f, 3, start); d != pendingHold {
			t.Fatalf("held update sent after %s, want its deadline %s", d, pendingHold)
		}
		f.release <- nil
		want := [][]string{{"x@running"}, {"x@running"}, {"h@pending"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}

		backoff = 2 * pendingHold
		start = time.Now()
		u.add(statusUp("h2", pending))
		u.add(statusUp("y", running))
		sentAfter(t, f, 4, start)
		f.release <- errors.New("servers unreachable")
		if d := sentAfter(t, f, 5, start); d != backoff {
			t.Fatalf("retry after %s, want the backoff %s", d, backoff)
		}
		f.release <- nil
		want = append(want, []string{"y@running"}, []string{"h2@pending", "y@running"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// Cancelling the updater's context mid-hold ends the wait: the held
// update is never sent, and no wait or send goroutine is left (the bubble
// would not end).
func TestUpdaterCancelledMidHoldSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold, u.startHold, u.busyStartHold = pendingHold, startingHold, busyStartingHold
		u.add(startingUp("a"))
		u.add(statusUp("r", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		time.Sleep(pendingHold / 2)
		cancel()
		synctest.Wait()
		u.mu.Lock()
		held, inflight := u.held, u.inflight
		u.mu.Unlock()
		if held != nil || inflight {
			t.Fatalf("after cancel: wait armed %v, send in flight %v; want neither", held != nil, inflight)
		}
		time.Sleep(busyStartingHold)
		synctest.Wait()
		if got := f.sent(); len(got) != 0 {
			t.Fatalf("held updates sent after the cancel: %v", got)
		}
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		synctest.Wait()
		if got := f.sent(); len(got) != 0 {
			t.Fatalf("an update sent after the cancel: %v", got)
		}
	})
}
