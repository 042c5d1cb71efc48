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

// Allocs that start together report pending and running in one batch:
// pending updates wait (nothing is sent), and the first running one sends
// them all at once, without waiting out the hold.
func TestUpdaterSendsPendingWithTheRunningThatFollows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		start := time.Now()
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		synctest.Wait()
		if got := f.sent(); len(got) != 0 {
			t.Fatalf("pending updates sent at once: %v", got)
		}
		time.Sleep(pendingHold / 2)
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		synctest.Wait()
		want := [][]string{{"a@running", "b@pending"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if d := time.Since(start); d != pendingHold/2 {
			t.Fatalf("sent after %s, want at the running update (%s)", d, pendingHold/2)
		}
		f.release <- nil
		// The hold ran out with nothing waiting: nothing more is sent.
		time.Sleep(2 * pendingHold)
		synctest.Wait()
		if got := f.sent(); len(got) != 1 {
			t.Fatalf("batches %v, want the one", got)
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
		// While a batch is in flight, a pending update waits for it, not
		// for the hold: it goes in the next batch.
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		f.release <- nil
		synctest.Wait()
		want = append(want, []string{"b@pending"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != pendingHold {
			t.Fatalf("batches %v after %s, want %v at once", got, time.Since(start), want)
		}
		f.release <- nil
	})
}
