package allocrunner

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// heldStore holds the write of a task state whose task is in the given
// lifecycle state until release is closed.
type heldStore struct {
	*fullStore
	hold    pb.TaskLifecycleState
	holding chan struct{} // closed when a held write starts
	release chan struct{}
	once    sync.Once
	freed   sync.Once
}

// free lets held writes through.
func (s *heldStore) free() { s.freed.Do(func() { close(s.release) }) }

func (s *heldStore) PutTaskState(rec *pb.TaskStateRecord) error {
	if rec.GetState().GetState() == s.hold {
		s.once.Do(func() { close(s.holding) })
		<-s.release
	}
	return s.fullStore.PutTaskState(rec)
}

// A task that started is reported running while its state's write (an
// fsync) is still under way: only an end waits for the write (see
// TestATerminalStatusWaitsForTheTaskStatesToBeWritten). A volume move's
// new alloc was seen running one client fsync later than need be. Once
// the write lands the status is not sent again.
func TestARunningStatusIsReportedBeforeItsWrite(t *testing.T) {
	e := newEnv(t)
	store := &heldStore{fullStore: &fullStore{DB: e.db}, hold: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING,
		holding: make(chan struct{}), release: make(chan struct{})}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, mockTask("web", sdk.ConfigMap{"run_for": sdk.DurationValue(time.Hour)}))
	ar, u := e.runner(a, j, func(c *Config) { c.Store = store })
	t.Cleanup(store.free) // before the runner's kill, which a held write would hold up
	select {
	case <-store.holding:
	case <-time.After(generous):
		t.Fatal("the running task's state was never written")
	}
	waitFor(t, func() error {
		if !slices.Contains(u.statuses(), pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING) {
			return fmt.Errorf("reported %v while the running state's write is held, want running among them", u.statuses())
		}
		return nil
	})
	if recs, _ := e.db.TaskStates(ar.ID()); len(recs) == 1 && isRunning(recs[0].GetState()) {
		t.Fatal("the running state is written while its write is held")
	}
	u.mu.Lock()
	before := len(u.all)
	u.mu.Unlock()
	store.free()
	waitFor(t, func() error {
		if recs, _ := e.db.TaskStates(ar.ID()); len(recs) != 1 || !isRunning(recs[0].GetState()) {
			return fmt.Errorf("task states %v, want web running written", recs)
		}
		return nil
	})
	u.mu.Lock()
	after := len(u.all)
	u.mu.Unlock()
	if after != before {
		t.Fatalf("%d more reports after the write landed, want none (nothing changed)", after-before)
	}
}

// A task's end is not reported before its state is written, even while
// the alloc stays live (another task runs): a client restarted before the
// write would find the task live and might run it again, after the
// servers were told it had ended.
func TestATaskEndIsReportedOnlyOnceWritten(t *testing.T) {
	e := newEnv(t)
	store := &heldStore{fullStore: &fullStore{DB: e.db}, hold: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD,
		holding: make(chan struct{}), release: make(chan struct{})}
	a, j := job(pb.JobType_JOB_TYPE_BATCH, nil, mockTask("web", sdk.ConfigMap{"run_for": sdk.DurationValue(time.Hour)}),
		mockTask("side", sdk.ConfigMap{"run_for": sdk.DurationValue(time.Millisecond)}))
	ar, u := e.runner(a, j, func(c *Config) { c.Store = store })
	t.Cleanup(store.free)
	select {
	case <-store.holding:
	case <-time.After(generous):
		t.Fatal("the ended task's state was never written")
	}
	sideDead := func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, up := range u.all {
			if up.GetTaskStates()["side"].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
				return true
			}
		}
		return false
	}
	if sideDead() {
		t.Fatal("side reported dead while its state's write is held")
	}
	if s, _ := ar.ClientStatus(); s == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
		t.Fatal("the alloc is complete while web runs")
	}
	store.free()
	waitFor(t, func() error {
		if !sideDead() {
			return fmt.Errorf("side not reported dead once its state is written: %v", u.statuses())
		}
		return nil
	})
}

// deadFullStore fails the writes of ended task states while full is set,
// counting them.
type deadFullStore struct {
	*fullStore
	deadFull atomic.Bool
	failed   atomic.Int32
}

func (s *deadFullStore) PutTaskState(rec *pb.TaskStateRecord) error {
	if s.deadFull.Load() && rec.GetState().GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		s.failed.Add(1)
		return errDiskFull
	}
	return s.fullStore.PutTaskState(rec)
}

// A task's end whose write failed (a full disk) is not reported either:
// it is told once the state is written again (saveLoop), not by the
// failed write.
func TestATaskEndWhoseWriteFailedIsReportedOnlyOnceWritten(t *testing.T) {
	e := newEnv(t)
	store := &deadFullStore{fullStore: &fullStore{DB: e.db}}
	store.deadFull.Store(true)
	a, j := job(pb.JobType_JOB_TYPE_BATCH, nil, mockTask("web", sdk.ConfigMap{"run_for": sdk.DurationValue(time.Hour)}),
		mockTask("side", sdk.ConfigMap{"run_for": sdk.DurationValue(time.Millisecond)}))
	_, u := e.runner(a, j, func(c *Config) { c.Store = store })
	t.Cleanup(func() { store.deadFull.Store(false) })
	sideDead := func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, up := range u.all {
			if up.GetTaskStates()["side"].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
				return true
			}
		}
		return false
	}
	// The second failure is saveLoop's retry, a backoff after the first
	// write's failure, whose report would have come at once.
	waitFor(t, func() error {
		if n := store.failed.Load(); n < 2 {
			return fmt.Errorf("%d failed writes of side's end, want 2", n)
		}
		return nil
	})
	if sideDead() {
		t.Fatal("side reported dead while its state's write failed")
	}
	store.deadFull.Store(false)
	waitFor(t, func() error {
		if !sideDead() {
			return fmt.Errorf("side not reported dead once its state is written: %v", u.statuses())
		}
		return nil
	})
}
