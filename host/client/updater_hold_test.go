package client

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func statusUp(id string, st pb.AllocClientStatus) *pb.AllocClientUpdate {
	return &pb.AllocClientUpdate{AllocId: id, ClientStatus: st, ClientDescription: pb.EnumWord(st)}
}

// A running update is sent at once, alone: the pending updates of other
// allocs still starting stay held, so each alloc that starts within the
// hold is written once (running), not twice. One whose hold runs out is
// sent then.
func TestUpdaterRunningLeavesOtherPendingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		start := time.Now()
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		u.add(statusUp("c", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		synctest.Wait()
		if got := f.sent(); len(got) != 0 {
			t.Fatalf("pending updates sent at once: %v", got)
		}
		time.Sleep(pendingHold / 2)
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		synctest.Wait()
		want := [][]string{{"a@running"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if d := time.Since(start); d != pendingHold/2 {
			t.Fatalf("sent after %s, want at the running update (%s)", d, pendingHold/2)
		}
		f.release <- nil
		// b starts within the hold: its running replaces its pending.
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		synctest.Wait()
		want = append(want, []string{"b@running"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		f.release <- nil
		// c does not: its pending goes when the hold runs out.
		time.Sleep(pendingHold/2 - time.Millisecond)
		synctest.Wait()
		if got := f.sent(); len(got) != 2 {
			t.Fatalf("batches %v before the hold ran out, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		want = append(want, []string{"c@pending"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != pendingHold {
			t.Fatalf("batches %v after %s, want %v after %s", got, time.Since(start), want, pendingHold)
		}
		f.release <- nil
		// The hold ended with nothing waiting: nothing more is sent.
		time.Sleep(2 * pendingHold)
		synctest.Wait()
		if got := f.sent(); len(got) != 3 {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// A pending update with nothing after it is sent once the hold runs out.
func TestUpdaterSendsALonePendingAfterTheHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		start := time.Now()
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		time.Sleep(pendingHold - time.Millisecond)
		synctest.Wait()
		if got := f.sent(); len(got) != 0 {
			t.Fatalf("sent before the hold ran out: %v", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		want := [][]string{{"a@pending"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != pendingHold {
			t.Fatalf("batches %v after %s, want %v after %s", got, time.Since(start), want, pendingHold)
		}
		// A pending update that comes while a batch is in flight is held
		// too: the end of that batch does not send it, its hold does.
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		f.release <- nil
		synctest.Wait()
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v at the end of the batch in flight, want %v", got, want)
		}
		time.Sleep(pendingHold)
		synctest.Wait()
		want = append(want, []string{"b@pending"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != 2*pendingHold {
			t.Fatalf("batches %v after %s, want %v after %s", got, time.Since(start), want, 2*pendingHold)
		}
		f.release <- nil
	})
}
