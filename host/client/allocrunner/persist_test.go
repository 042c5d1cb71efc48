package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/host/client/state"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// errDiskFull is what fullStore's writes fail with while it is full.
var errDiskFull = errors.New("write state.db: no space left on device")

// fullStore is the client state DB on a disk that is full while full is
// set: the alloc and task state writes fail (the driver manager's task
// handles go to the DB beneath, which the test fills or not itself).
type fullStore struct {
	*state.DB
	full atomic.Bool
}

var _ Store = (*fullStore)(nil)

func (s *fullStore) PutAlloc(rec *pb.AllocRecord) error {
	if s.full.Load() {
		return errDiskFull
	}
	return s.DB.PutAlloc(rec)
}

func (s *fullStore) PutTaskState(rec *pb.TaskStateRecord) error {
	if s.full.Load() {
		return errDiskFull
	}
	return s.DB.PutTaskState(rec)
}

// newFullRunner builds (without running) an alloc runner of one service
// task that runs for an hour, on store.
func (e *env) newFullRunner(store *fullStore, restart *pb.RestartPolicy) *AllocRunner {
	e.t.Helper()
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, restart, mockTask("web", sdk.ConfigMap{"run_for": sdk.DurationValue(time.Hour)}))
	ar, _ := e.newRunner(a, j, func(c *Config) { c.Store = store })
	return ar
}

// runOnFullStore runs newFullRunner's alloc (not restarted) on a
// fullStore with room, until its task runs.
func runOnFullStore(t *testing.T) (*env, *fullStore, *AllocRunner) {
	t.Helper()
	e := newEnv(t)
	store := &fullStore{DB: e.db}
	ar := e.newFullRunner(store, &pb.RestartPolicy{Attempts: 0, Mode: pb.RestartMode_RESTART_MODE_FAIL})
	go ar.Run()
	waitTask(t, ar, "web", isRunning)
	return e, store, ar
}

// killOnAFullDisk fills the disk, then kills the alloc.
func killOnAFullDisk(t *testing.T, store *fullStore, ar *AllocRunner) {
	t.Helper()
	store.full.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := ar.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}

// An alloc whose record the state DB could not write
// ran anyway; a client restarted did not know it, killed its tasks as
// orphans while the servers showed them running. Such an alloc does not
// run: its tasks fail at once with an event naming the error, and nothing
// of it is in the DB nor started.
func TestAnAllocTheStateDBCannotRecordDoesNotRun(t *testing.T) {
	e := newEnv(t)
	store := &fullStore{DB: e.db}
	store.full.Store(true)
	ar := e.newFullRunner(store, &pb.RestartPolicy{Attempts: 0, Mode: pb.RestartMode_RESTART_MODE_FAIL})
	go ar.Run()
	waitDone(t, ar)

	st := ar.TaskStates()["web"]
	ev := event(st, "Setup Failure")
	if st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || !st.GetFailed() || ev == nil || !ev.GetFailed() ||
		!strings.Contains(ev.GetMessage(), "no space left on device") || !strings.Contains(ev.GetMessage(), ar.ID()) ||
		ev.GetDetails()["reason"] != "state-not-persisted" {
		t.Fatalf("task state %v, want dead and failed with a Setup Failure naming the alloc and the write error, reason state-not-persisted", st)
	}
	if event(st, "Started") != nil {
		t.Fatalf("the task started: %v", st)
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED {
		t.Fatalf("alloc status %v, want failed", s)
	}
	if hs, err := e.db.TaskHandles(); err != nil || len(hs) != 0 {
		t.Fatalf("task handles %v, %v: want none (nothing started)", hs, err)
	}
	store.full.Store(false)
	if _, ok, _ := e.db.Alloc(ar.ID()); ok {
		t.Fatal("the alloc is in the state DB")
	}
	if ts, _ := e.db.TaskStates(ar.ID()); len(ts) != 0 {
		t.Fatalf("task states %v in the state DB of an alloc it does not hold", ts)
	}
}

// An attempt is recorded before the driver starts it; one that cannot be
// recorded is not started (a Setup Failure naming the error, the restart
// policy decides), and once the disk has room again the next attempt
// starts, recorded: the DB names the running attempt, whose handle it
// holds.
func TestAnAttemptTheStateDBCannotRecordIsNotStarted(t *testing.T) {
	e := newEnv(t)
	store := &fullStore{DB: e.db}
	ar := e.newFullRunner(store, &pb.RestartPolicy{Attempts: 5, IntervalMs: time.Hour.Milliseconds(), DelayMs: 20, Mode: pb.RestartMode_RESTART_MODE_FAIL})
	store.full.Store(true) // after the alloc record, before any task state
	go ar.Run()
	st := waitTask(t, ar, "web", func(st *pb.TaskState) bool { return event(st, "Setup Failure") != nil })
	ev := event(st, "Setup Failure")
	if !ev.GetFailed() || ev.GetDetails()["reason"] != "state-not-persisted" || !strings.Contains(ev.GetMessage(), "no space left on device") {
		t.Fatalf("Setup Failure %v, want failed, reason state-not-persisted, naming the write error", ev)
	}
	if event(st, "Started") != nil {
		t.Fatalf("an attempt started that the state DB could not record: %v", st)
	}
	if hs, err := e.db.TaskHandles(); err != nil || len(hs) != 0 {
		t.Fatalf("task handles %v, %v: want none", hs, err)
	}

	store.full.Store(false)
	waitTask(t, ar, "web", isRunning)
	waitFor(t, func() error {
		recs, err := e.db.TaskStates(ar.ID())
		if err != nil || len(recs) != 1 {
			return fmt.Errorf("task states %v, %v", recs, err)
		}
		hs, err := e.db.TaskHandles()
		if err != nil || len(hs) != 1 {
			return fmt.Errorf("task handles %v, %v: want one", hs, err)
		}
		rec, id := recs[0], hs[0].GetHandle().GetConfig().GetId()
		if rec.GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING || rec.GetTaskId() != id {
			return fmt.Errorf("task state record %v, want running attempt %s", rec, id)
		}
		return nil
	})
}

// A task state that could not be written (the task died while the disk
// was full) is written once the disk has room again, without a restart:
// a restarted client must not find running a task that is dead.
func TestATaskStateNotWrittenIsWrittenWhenTheDiskHasRoom(t *testing.T) {
	e, store, ar := runOnFullStore(t)
	waitFor(t, func() error {
		if recs, _ := e.db.TaskStates(ar.ID()); len(recs) != 1 || recs[0].GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return fmt.Errorf("task states %v, want web running", recs)
		}
		return nil
	})

	killOnAFullDisk(t, store, ar)
	if recs, _ := e.db.TaskStates(ar.ID()); len(recs) != 1 || recs[0].GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
		t.Fatalf("task states %v while the disk is full, want the running one still", recs)
	}
	store.full.Store(false)
	waitFor(t, func() error {
		recs, _ := e.db.TaskStates(ar.ID())
		if len(recs) != 1 || recs[0].GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || recs[0].GetTaskId() != "" {
			return fmt.Errorf("task states %v, want web dead with no attempt", recs)
		}
		return nil
	})
}

// An in-place update whose alloc record could not be written is written
// once the disk has room again.
func TestAnAllocUpdateNotWrittenIsWrittenWhenTheDiskHasRoom(t *testing.T) {
	e, store, ar := runOnFullStore(t)
	store.full.Store(true)
	updated := proto_clone(ar.Alloc())
	updated.AllocModifyIndex = 99
	ar.Update(updated, nil)
	if rec, _, _ := e.db.Alloc(ar.ID()); rec.GetAlloc().GetAllocModifyIndex() == 99 {
		t.Fatal("the update was written on a full disk")
	}
	store.full.Store(false)
	waitFor(t, func() error {
		if rec, _, _ := e.db.Alloc(ar.ID()); rec.GetAlloc().GetAllocModifyIndex() != 99 {
			return fmt.Errorf("alloc record %v, want alloc_modify_index 99", rec.GetAlloc())
		}
		return nil
	})
}

// An alloc whose tasks ended while the disk was full is not reported
// ended (complete, failed) before their states are written: the servers
// never move an alloc back from it, and a client restarted before the
// write finds the DB's older state and starts the task again, running
// while the servers show it ended (seen by the full disk acceptance test).
// Once the disk has room the end is written and told.
func TestATerminalStatusWaitsForTheTaskStatesToBeWritten(t *testing.T) {
	_, store, ar := runOnFullStore(t)
	waitFor(t, func() error {
		if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
			return fmt.Errorf("alloc status %v, want running", s)
		}
		return nil
	})

	killOnAFullDisk(t, store, ar)
	if st := ar.TaskStates()["web"]; st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("task state %v after the kill, want dead", st)
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
		t.Fatalf("alloc status %v while the dead task's state is not written, want running still", s)
	}
	store.full.Store(false)
	waitFor(t, func() error {
		if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
			return fmt.Errorf("alloc status %v once the disk has room, want complete", s)
		}
		return nil
	})
}
