package taskrunner

import (
	"context"
	"fmt"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// settleUnhandled ends attempt r.TaskID, which the restored record names
// but which has no handle in the state db: the client stopped after the
// write-ahead record and before the driver's handle was written (the driver
// plugin outlives the client and may have started it), or the attempt's end
// was never written (a full disk). The driver is told to drop the attempt
// before any new start, so it never runs unsupervised next to the next one;
// one recorded running is a failed attempt, its exited hooks run as for any
// exit. It reports whether Run is over.
func (tr *TaskRunner) settleUnhandled(r *Restore) bool {
	id := r.TaskID
	running := r.State.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING
	if running {
		tr.logger.Warn("task recorded running has no handle to recover it by; treating it as exited", "task_id", id)
		ev := tr.event("Failed Restoring", fmt.Sprintf("recovering task %q: attempt %s is recorded running but the state db holds no handle for it", tr.Name(), id),
			map[string]string{"task_id": id})
		tr.update(func(st *pb.TaskState) {
			st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING
			st.FinishedAt = tr.cfg.Now().UnixNano()
			appendEvent(st, ev)
		})
		tr.runExited(id, &driverpb.ExitResult{ExitCode: -1, Err: "not recovered after a client restart: the state db holds no handle for it"})
	}
	if tr.cfg.Driver == nil {
		// The record keeps naming the attempt (tr.taskID) until a driver
		// can drop it; no attempt starts without a driver either.
		tr.logger.Error("cannot destroy a recorded attempt without a handle: its driver is unknown", "task_id", id, "error", tr.cfg.DriverErr)
	} else {
		tr.destroyAttempt(id)
	}
	return running && !tr.restartAfter()
}

// recover re-attaches to the attempt that ran before the client restarted
// and supervises it; it reports whether Run is over.
func (tr *TaskRunner) recover(h *driverpb.TaskHandle) bool {
	id := h.GetConfig().GetId()
	info := tr.currentInfo()
	if tr.cfg.Driver == nil {
		tr.logger.Error("cannot recover task: its driver is unknown", "task_id", id, "error", tr.cfg.DriverErr)
		return false
	}
	ctx, cancel := context.WithTimeout(tr.ctx, DefaultHookTimeout)
	err := tr.cfg.Driver.RecoverTask(ctx, h)
	cancel()
	if err != nil {
		// The attempt is gone (or its driver cannot take it back): it is
		// a failed attempt, and the restart policy decides.
		tr.logger.Warn("could not recover task; treating it as exited", "task_id", id, "error", err)
		tr.EmitEvent(tr.event("Failed Restoring", fmt.Sprintf("recovering task %q: %v", id, err), nil))
		// The attempt ended while the client was away: the exited hooks
		// undo what its hooks left behind before the restart (a CSI
		// plugin's restored registry entry), as for any exit.
		tr.runExited(id, &driverpb.ExitResult{ExitCode: -1, Err: fmt.Sprintf("not recovered after a client restart: %v", err)})
		tr.destroyAttempt(id)
		return !tr.restartAfter()
	}
	tr.mu.Lock()
	tr.taskID, tr.running = id, true
	tr.newAttempt(id)
	tr.mu.Unlock()
	tr.logger.Info("task recovered", "task_id", id)
	// The state is persisted again naming this attempt: an adopted handle
	// (see the client's restore) was not named before.
	tr.update(func(st *pb.TaskState) { st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING })
	if _, err := tr.prestart(info, 0, true); err != nil {
		tr.logger.Error("prestart hooks of a recovered task failed; the task keeps running", "error", err)
	}
	tr.poststart(info, id, true)
	res, req := tr.wait(id)
	switch {
	case res == nil:
		return true
	case tr.killedNow():
		tr.finishKilled()
		return true
	case req != nil && !req.failure:
		tr.restartNow(req.reason)
		return false
	case req == nil && tr.cfg.Ephemeral && res.GetExitCode() == 0 && res.GetErr() == "":
		tr.update(func(st *pb.TaskState) {
			st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD
			st.FinishedAt = tr.cfg.Now().UnixNano()
		})
		return true
	}
	return !tr.restartAfter()
}
