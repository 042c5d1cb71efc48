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

// Allocs that start within the hold never report pending: each pending
// update waits, and is replaced by the alloc's running one. Another
// alloc's running update goes at once, alone: the pending one does not
// ride with it (a row every server applies, replaced a moment later).
func TestUpdaterHeldPendingIsReplacedByItsRunning(t *testing.T) {
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
		want := [][]string{{"a@running"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		if d := time.Since(start); d != pendingHold/2 {
			t.Fatalf("sent after %s, want at the running update (%s)", d, pendingHold/2)
		}
		// b's hold still runs while a's batch is in flight; b starts
		// before it ends.
		time.Sleep(pendingHold / 4)
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		f.release <- nil
		synctest.Wait()
		want = append(want, []string{"b@running"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
		f.release <- nil
		// Nothing is held any more: nothing more is sent.
		time.Sleep(2 * pendingHold)
		synctest.Wait()
		if got := f.sent(); len(got) != 2 {
			t.Fatalf("batches %v, want the two", got)
		}
	})
}

// A pending update with nothing after it is sent once the hold runs out,
// counted from the alloc's first pending update still waiting; a batch in
// flight when it is added does not shorten its wait.
func TestUpdaterSendsALonePendingAfterTheHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		start := time.Now()
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		time.Sleep(pendingHold / 2)
		// A later pending update of a (a new task event) replaces the
		// waiting one but keeps its time.
		u.add(&pb.AllocClientUpdate{AllocId: "a", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING, ClientDescription: "pending2"})
		time.Sleep(pendingHold/2 - time.Millisecond)
		synctest.Wait()
		if got := f.sent(); len(got) != 0 {
			t.Fatalf("sent before the hold ran out: %v", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		want := [][]string{{"a@pending2"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) || time.Since(start) != pendingHold {
			t.Fatalf("batches %v after %s, want %v after %s", got, time.Since(start), want, pendingHold)
		}
		// While a batch is in flight, a pending update still waits out
		// its hold: the batch's end does not send it.
		u.add(statusUp("b", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		bAt := time.Now()
		f.release <- nil
		synctest.Wait()
		if got := f.sent(); len(got) != 1 {
			t.Fatalf("batches %v: b sent when a's batch ended", got)
		}
		time.Sleep(pendingHold)
		synctest.Wait()
		want = append(want, []string{"b@pending"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) || time.Since(bAt) != pendingHold {
			t.Fatalf("batches %v after %s, want %v after %s", got, time.Since(bAt), want, pendingHold)
		}
		f.release <- nil
	})
}

// A task that restarts within the hold reports no pending blip: its
// pending update is replaced by the running one.
func TestUpdaterRestartWithinTheHoldSendsOnlyRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error, 10)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold = pendingHold
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING))
		f.release <- nil
		synctest.Wait()
		u.add(statusUp("a", pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING))
		time.Sleep(pendingHold / 2)
		u.add(&pb.AllocClientUpdate{AllocId: "a", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, ClientDescription: "running2"})
		f.release <- nil
		synctest.Wait()
		time.Sleep(2 * pendingHold)
		synctest.Wait()
		want := [][]string{{"a@running"}, {"a@running2"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v, want %v", got, want)
		}
	})
}

// An alloc none of whose tasks has started waits the longer startHold;
// once a task has started (a restart's pending), the short hold applies.
func TestUpdaterStartingAllocWaitsTheLongerHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error, 10)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold, u.startHold = pendingHold, startingHold
		f.release <- nil
		f.release <- nil
		pending := pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
		start := time.Now()
		u.add(&pb.AllocClientUpdate{AllocId: "new", ClientStatus: pending, ClientDescription: "pending",
			TaskStates: map[string]*pb.TaskState{"web": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING}}})
		u.add(&pb.AllocClientUpdate{AllocId: "restarting", ClientStatus: pending, ClientDescription: "pending",
			TaskStates: map[string]*pb.TaskState{"web": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING, StartedAt: 1, Restarts: 1}}})
		time.Sleep(pendingHold)
		synctest.Wait()
		want := [][]string{{"restarting@pending"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v after %s, want %v", got, time.Since(start), want)
		}
		time.Sleep(startingHold - pendingHold - time.Millisecond)
		synctest.Wait()
		if got := f.sent(); len(got) != 1 {
			t.Fatalf("batches %v: the starting alloc's pending sent before %s", got, startingHold)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		want = append(want, []string{"new@pending"})
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v after %s, want %v", got, time.Since(start), want)
		}
	})
}

// A starting alloc's pending update waits the long hold; once one of its
// tasks has started (another still pending), its next pending update is
// due after the short hold, not at the end of the long one.
func TestUpdaterStartedTaskBringsTheHoldForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSend{release: make(chan error, 10)}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
		u.hold, u.startHold = pendingHold, startingHold
		f.release <- nil
		pending := pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
		u.add(&pb.AllocClientUpdate{AllocId: "a", ClientStatus: pending, ClientDescription: "received"})
		time.Sleep(startingHold / 2)
		u.add(&pb.AllocClientUpdate{AllocId: "a", ClientStatus: pending, ClientDescription: "one started",
			TaskStates: map[string]*pb.TaskState{"web": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: 1}}})
		start := time.Now()
		time.Sleep(pendingHold)
		synctest.Wait()
		want := [][]string{{"a@one started"}}
		if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("batches %v %s after the task started, want %v", got, time.Since(start), want)
		}
	})
}
