package allocrunner

// The alloc's task states: written to the client state DB (retried while
// the disk refuses), and the alloc's status reported to the servers.

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// taskChanged persists a task's state and reports the alloc's status. It
// returns the error of a write that failed.
//
// A change of events alone is not written: what recovery needs (the
// state, its times, the restarts, the attempt) is written at once — a
// task that completed must never be found running — and the events ride
// along with the next such write. That spares the fsyncs of "Received",
// "Task Setup" and "Terminated" on the way to running.
//
// A write that fails is the task runner's to act on where it is
// write-ahead (an attempt is not started unrecorded); otherwise the record
// is written again by saveLoop, with backoff, until it is (a full disk
// that has room again): a state the DB does not hold would have a
// restarted client recover an attempt that ended, or start again a task
// that completed. While a rewrite is pending (unsaved) every change is
// written again, even one whose record equals what the DB holds; with
// none pending, a change equal to what the DB holds writes nothing. An
// alloc destroyed or never recorded writes nothing and drops the pending
// rewrite.
func (ar *AllocRunner) taskChanged(name, driver string, st *pb.TaskState, taskID string) error {
	rec := &pb.TaskStateRecord{AllocId: ar.ID(), Task: name, State: st, TaskId: taskID, Driver: driver,
		UpdatedAt: ar.cfg.Now().UnixNano()}
	key := proto.Clone(rec).(*pb.TaskStateRecord)
	key.State.Events, key.UpdatedAt = nil, 0
	ar.writeMu.Lock()
	ar.mu.Lock()
	skip := ar.destroyed || ar.recordErr != nil || ar.cfg.Store == nil
	ar.states[name] = st
	write := !skip && (!proto.Equal(ar.persisted[name], key) || ar.unsaved[name] != nil)
	// told: the change is reported before its write (an fsync). A task
	// still live (pending, running) in an alloc still live is the same
	// whatever the write's outcome, so the servers learn a task started
	// (a volume move's new alloc running) without waiting for the disk; a
	// client restarted before the write recovers the task from the older
	// record and reports again, and the servers move a live alloc between
	// live statuses. A task's end, and an alloc's terminal status
	// (setStatus), are told only once written: a client restarted before
	// the write would find the task live and might run it again.
	told, ended := false, false
	if !write {
		delete(ar.unsaved, name)
		ar.setStatus()
	} else if s, _ := clientStatus(ar.states); !rules.ClientStatusTerminal(s) && st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		ar.setStatus()
		told = true
	} else {
		ended = true
	}
	ar.mu.Unlock()
	if told {
		ar.report()
	}
	var err error
	if write {
		err = ar.cfg.Store.PutTaskState(rec)
		ar.mu.Lock()
		if err == nil {
			ar.persisted[name] = key
			delete(ar.unsaved, name)
		} else {
			ar.unsaved[name] = rec
		}
		ar.setStatus()
		ar.mu.Unlock()
	}
	ar.writeMu.Unlock()
	if err != nil {
		err = fmt.Errorf("alloc %s, task %q: persisting its state: %w", ar.ID(), name, err)
		ar.logger.Error("persisting task state; retrying", "task", name, "error", err)
		ar.startSaving()
	}
	select {
	case ar.changed <- struct{}{}:
	default:
	}
	// An end whose write failed is told by saveLoop once it is written.
	if !told && (err == nil || !ended) {
		ar.report()
	}
	return err
}

// Report sends the alloc's current status to OnUpdate again (the client
// does after it registers, so servers that lost an update learn it).
func (ar *AllocRunner) Report() { ar.report() }

// report sends the alloc's current status to OnUpdate.
func (ar *AllocRunner) report() {
	if ar.cfg.OnUpdate == nil {
		return
	}
	ar.mu.Lock()
	u := &pb.AllocClientUpdate{AllocId: ar.ID(), ClientStatus: ar.status, ClientDescription: ar.desc,
		TaskStates: make(map[string]*pb.TaskState, len(ar.states)), UpdatedAt: ar.cfg.Now().UnixNano()}
	for k, v := range ar.states {
		u.TaskStates[k] = v
	}
	ar.mu.Unlock()
	ar.cfg.OnUpdate(u)
}

// setStatus sets the status reported to the servers from the task states
// (call with mu held). A terminal one (complete, failed) waits until every
// task state is written: the servers never move an alloc back from it,
// and a client restarted before the write would find the DB's older state
// and start the task again, running while the servers show it ended.
func (ar *AllocRunner) setStatus() {
	st, desc := clientStatus(ar.states)
	if len(ar.unsaved) > 0 && (st == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE || st == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED) {
		return
	}
	ar.status, ar.desc = st, desc
}

// clientStatus derives the alloc's status from its tasks' states: failed
// when a task failed, complete when all are dead, running when one runs,
// pending otherwise.
func clientStatus(states map[string]*pb.TaskState) (pb.AllocClientStatus, string) {
	dead, running := 0, 0
	for _, st := range states {
		switch {
		case st.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD && st.GetFailed():
			return pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED, "Failed tasks"
		case st.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD:
			dead++
		case st.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING:
			running++
		}
	}
	switch {
	case len(states) > 0 && dead == len(states):
		return pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE, "All tasks have completed"
	case running > 0:
		return pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, "Tasks are running"
	}
	return pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING, "No tasks have started"
}

// persistAlloc writes the alloc record of an update. A write that fails
// is retried by saveLoop, except for an alloc that was never recorded
// (recordErr).
func (ar *AllocRunner) persistAlloc() {
	if ar.cfg.Store == nil {
		return
	}
	ar.writeMu.Lock()
	defer ar.writeMu.Unlock()
	ar.mu.Lock()
	rec := &pb.AllocRecord{Alloc: ar.alloc, Job: ar.job, UpdatedAt: ar.cfg.Now().UnixNano()}
	skip := ar.destroyed || ar.recordErr != nil
	ar.mu.Unlock()
	if skip {
		return
	}
	err := ar.cfg.Store.PutAlloc(rec)
	ar.mu.Lock()
	ar.allocUnsaved = err != nil
	ar.mu.Unlock()
	if err != nil {
		ar.logger.Error("persisting alloc; retrying", "error", err)
		ar.startSaving()
	}
}

// saveRetry is the backoff of saveLoop's writes.
var saveRetry = backoff.Backoff{Initial: 100 * time.Millisecond, Max: 10 * time.Second}

// startSaving starts saveLoop unless it runs.
func (ar *AllocRunner) startSaving() {
	ar.mu.Lock()
	defer ar.mu.Unlock()
	if ar.saving || ar.destroyed || ar.ctx.Err() != nil {
		return
	}
	ar.saving = true
	go ar.saveLoop()
}

// saveLoop writes again, with capped backoff, the alloc record and the
// task state records whose writes failed, until none is left, the runner
// is shut down (the next client recovers from what the DB holds) or the
// alloc is destroyed.
func (ar *AllocRunner) saveLoop() {
	for attempt := 1; ; attempt++ {
		if !backoff.Sleep(ar.ctx.Done(), saveRetry.Delay(attempt)) {
			ar.mu.Lock()
			ar.saving = false
			ar.mu.Unlock()
			return
		}
		if ar.saveUnsaved() {
			ar.report()
			return
		}
	}
}

// saveUnsaved makes one round of saveLoop's writes and reports whether
// the loop is over (it then marks it not running).
func (ar *AllocRunner) saveUnsaved() bool {
	ar.writeMu.Lock()
	defer ar.writeMu.Unlock()
	ar.mu.Lock()
	if ar.destroyed || ar.recordErr != nil {
		ar.saving = false
		ar.mu.Unlock()
		return true
	}
	allocRec := &pb.AllocRecord{Alloc: ar.alloc, Job: ar.job, UpdatedAt: ar.cfg.Now().UnixNano()}
	writeAlloc := ar.allocUnsaved
	recs := make(map[string]*pb.TaskStateRecord, len(ar.unsaved))
	for name, rec := range ar.unsaved {
		recs[name] = rec
	}
	ar.mu.Unlock()
	var errs []error
	if writeAlloc {
		if err := ar.cfg.Store.PutAlloc(allocRec); err != nil {
			errs = append(errs, err)
		} else {
			ar.mu.Lock()
			ar.allocUnsaved = false
			ar.mu.Unlock()
		}
	}
	for name, rec := range recs {
		if err := ar.cfg.Store.PutTaskState(rec); err != nil {
			errs = append(errs, err)
			continue
		}
		key := proto.Clone(rec).(*pb.TaskStateRecord)
		key.State.Events, key.UpdatedAt = nil, 0
		ar.mu.Lock()
		ar.persisted[name] = key
		delete(ar.unsaved, name)
		ar.mu.Unlock()
	}
	ar.mu.Lock()
	defer ar.mu.Unlock()
	if len(errs) > 0 {
		ar.logger.Warn("state db writes still failing; retrying", "error", errors.Join(errs...))
		return false
	}
	if !ar.allocUnsaved && len(ar.unsaved) == 0 {
		ar.logger.Info("state db writes that had failed are written")
		ar.saving = false
		ar.setStatus() // a terminal status held back is told now
		return true
	}
	return false
}
