package taskrunner

import (
	"context"
	"errors"

	"berth.dev/berth/sdk"
)

// A killed task's last attempt is forgotten by its driver (DestroyTask:
// the handle, the driver's state directory, the flavor's Release) after
// the runner says it stopped, not before: what waits for a task to stop
// (its alloc's volume unpublish, issue 26) needs the task's processes
// gone, which the attempt's exit already says (sdk WaitTask; an isolated
// task's exit is its namespace init's: the kernel ends every process of
// the namespace before it), not the driver's bookkeeping. What a driver
// set up on the host that would keep a volume busy goes at the exit, not
// at the destroy (the exec driver's shared self-binds of host-to-task and
// bidirectional mount sources: its flavor's Exited). The exited hooks (a
// volume's read-only binds of the task) and the finished hooks still run
// before.
//
// The record keeps naming the attempt until its DestroyTask returned, so
// a client that stops in between destroys it when it restores the task
// (destroyRestoredAttempt, before Stopped: that runner cannot know the
// attempt's processes are gone). A task killed while it restarts, an
// attempt whose WaitTask failed (nothing says its processes are gone:
// DestroyTask kills them and waits), and an attempt that ends for any other
// reason, are destroyed before Run goes on, as before: the next attempt
// must not start beside the last one's handle.
//
// Stopped is not closed when Run ends by Shutdown with the task not dead:
// the task still runs, for the next client to recover.

// Stopped is closed when the task will not run again and no attempt of it
// runs: Run is over but for the driver's DestroyTask of a killed task's
// last attempt. Done follows once that returned. A Shutdown that leaves
// the task alive (not dead) never closes it: wait on Done, or on the
// shutdown, too.
func (tr *TaskRunner) Stopped() <-chan struct{} { return tr.stopped }

// closeStopped closes stopped if the task is dead (Run's end).
func (tr *TaskRunner) closeStopped() {
	if tr.dead() {
		close(tr.stopped)
	}
}

// destroyDeferred destroys the attempt whose destroy was deferred (Run
// calls it after closing stopped).
func (tr *TaskRunner) destroyDeferred() {
	tr.mu.Lock()
	id := tr.destroyLater
	tr.destroyLater = ""
	tr.mu.Unlock()
	if id != "" && tr.cfg.Driver != nil {
		tr.destroyAttempt(id)
	}
}

// destroyRestoredAttempt destroys, before Stopped, the attempt a restored
// dead task's record still names: the client stopped after the task was
// killed and before its driver forgot the attempt. With a handle, the
// driver is given it first (RecoverTask), so that a plugin that does not
// know the attempt (a fresh one) destroys it as its own (the flavor's
// Release, its state directory), not as an orphan it knows nothing of.
func (tr *TaskRunner) destroyRestoredAttempt() {
	r := tr.cfg.Restore
	if r == nil {
		return
	}
	id := r.TaskID
	if id == "" {
		id = r.Handle.GetConfig().GetId()
	}
	if id == "" {
		return
	}
	if tr.cfg.Driver == nil {
		tr.logger.Error("cannot destroy the attempt a dead task's record names: its driver is unknown", "task_id", id, "error", tr.cfg.DriverErr)
		return
	}
	if h := r.Handle; h != nil && h.GetConfig().GetId() == id {
		ctx, cancel := context.WithTimeout(tr.ctx, DefaultHookTimeout)
		err := tr.cfg.Driver.RecoverTask(ctx, h)
		cancel()
		if err != nil && !errors.Is(err, sdk.ErrTaskNotFound) {
			tr.logger.Warn("recovering the attempt a dead task's record names, to destroy it", "task_id", id, "error", err)
		}
	}
	tr.destroyAttempt(id)
}
