package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// cleanupTimeout bounds the DestroyTask after an attempt ended.
const cleanupTimeout = 30 * time.Second

type waitResult struct {
	res *driverpb.ExitResult
	err error
}

// wait supervises the running attempt id until it exits, stopping it when
// the runner is killed or a restart is asked for. It returns how the
// attempt ended and, for a requested restart, the request; a nil result
// means the runner was shut down (the attempt keeps running).
func (tr *TaskRunner) wait(id string) (*driverpb.ExitResult, *restartRequest) {
	resCh := make(chan waitResult, 1)
	go func() {
		res, err := tr.cfg.Driver.WaitTask(tr.ctx, id)
		resCh <- waitResult{res, err}
	}()
	var r waitResult
	var req *restartRequest
	// stopped waits for the exit of an attempt being stopped.
	stopped := func() bool {
		select {
		case r = <-resCh:
			return true
		case <-tr.ctx.Done():
			return false
		}
	}
wait:
	for {
		select {
		case r = <-resCh:
			break wait
		case <-tr.killCh:
			tr.mu.Lock()
			reason := tr.killReason
			tr.mu.Unlock()
			tr.stop(id, reason, false)
			if !stopped() {
				return nil, nil
			}
			break wait
		case rq := <-tr.restartCh:
			if rq.taskID != id {
				continue // asked for an attempt that has ended
			}
			req = &rq
			details := map[string]string{"reason": rq.reason}
			if rq.failure {
				details["failure"] = "true"
			}
			tr.EmitEvent(tr.event("Restart Signaled", rq.reason, details))
			tr.stop(id, rq.reason, true)
			if !stopped() {
				return nil, nil
			}
			break wait
		case <-tr.ctx.Done():
			return nil, nil
		}
	}
	if r.err != nil && tr.ctx.Err() != nil {
		return nil, nil
	}
	res := r.res
	if r.err != nil {
		res = &driverpb.ExitResult{ExitCode: -1, Err: r.err.Error()}
	}
	tr.mu.Lock()
	tr.running = false
	killed := tr.killed
	tr.mu.Unlock()
	details := map[string]string{
		"exit_code":  strconv.Itoa(int(res.GetExitCode())),
		"signal":     strconv.Itoa(int(res.GetSignal())),
		"oom_killed": strconv.FormatBool(res.GetOomKilled()),
	}
	msg := fmt.Sprintf("Exit code: %d", res.GetExitCode())
	if res.GetSignal() != 0 {
		msg += fmt.Sprintf(", signal: %d", res.GetSignal())
	}
	if res.GetOomKilled() {
		msg += ", OOM killed (memory limit reached)"
	}
	if res.GetErr() != "" {
		msg += ", error: " + res.GetErr()
	}
	tr.update(func(st *pb.TaskState) {
		st.FinishedAt = finishedAt(res, tr.cfg.Now())
		appendEvent(st, tr.event("Terminated", msg, details))
		if killed {
			appendEvent(st, tr.event("Killed", "Task successfully killed", nil))
		}
	})
	tr.runExited(id, res)
	if killed && r.err == nil {
		// The task will not run again and its processes are gone (an
		// exit says so; a failed WaitTask does not, and its attempt is
		// destroyed, killed and waited for, here): the driver forgets the
		// attempt after stopped is closed, off the path of what waits for
		// that (stopped.go).
		tr.mu.Lock()
		tr.destroyLater = id
		tr.mu.Unlock()
	} else {
		tr.destroyAttempt(id)
	}
	return res, req
}

// runFinished runs the finished hooks (reverse order) once the task is
// dead for good.
func (tr *TaskRunner) runFinished() {
	info := tr.currentInfo()
	tr.reverse(func(h runhooks.Hook) {
		if fh, ok := h.(runhooks.FinishedHook); ok {
			ctx, cancel := tr.hookCtx(h)
			tr.teardownErr("finished", h, fh.Finished(ctx, &runhooks.FinishedRequest{TaskInfo: info}))
			cancel()
		}
	})
}

// runExited runs the exited hooks (reverse order) for attempt id.
func (tr *TaskRunner) runExited(id string, res *driverpb.ExitResult) {
	info := tr.currentInfo()
	tr.reverse(func(h runhooks.Hook) {
		if eh, ok := h.(runhooks.ExitedHook); ok {
			ctx, cancel := tr.hookCtx(h)
			tr.teardownErr("exited", h, eh.Exited(ctx, &runhooks.ExitedRequest{TaskInfo: info, TaskID: id, Result: res}))
			cancel()
		}
	})
}

func finishedAt(res *driverpb.ExitResult, now time.Time) int64 {
	if res.GetFinishedAt() > 0 {
		return res.GetFinishedAt()
	}
	return now.UnixNano()
}

// stop runs the stop hooks (reverse order) and stops attempt id with the
// task's kill_signal and kill_timeout.
func (tr *TaskRunner) stop(id, reason string, restart bool) {
	info := tr.currentInfo()
	tr.reverse(func(h runhooks.Hook) {
		if sh, ok := h.(runhooks.StopHook); ok {
			ctx, cancel := tr.hookCtx(h)
			tr.teardownErr("stop", h, sh.Stop(ctx, &runhooks.StopRequest{TaskInfo: info, TaskID: id, Reason: reason, Restart: restart}))
			cancel()
		}
	})
	timeout := durations.FromMs(info.Task.GetKillTimeoutMs())
	if timeout <= 0 {
		timeout = DefaultKillTimeout
	}
	tr.EmitEvent(tr.event("Killing", fmt.Sprintf("Sent interrupt, waiting %s before force killing (%s)", timeout, reason),
		map[string]string{"kill_timeout_ms": strconv.FormatInt(timeout.Milliseconds(), 10), "reason": reason}))
	ctx, cancel := context.WithTimeout(tr.ctx, timeout+stopGrace)
	defer cancel()
	if err := tr.cfg.Driver.StopTask(ctx, id, timeout, info.Task.GetKillSignal()); err != nil && !errors.Is(err, sdk.ErrTaskNotFound) {
		tr.logger.Error("stopping task", "task_id", id, "error", err)
	}
}

// destroyAttempt makes the driver forget a finished attempt (its handle is
// deleted with it).
func (tr *TaskRunner) destroyAttempt(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tr.ctx), cleanupTimeout)
	defer cancel()
	if err := tr.cfg.Driver.DestroyTask(ctx, id, true); err != nil && !errors.Is(err, sdk.ErrTaskNotFound) {
		tr.logger.Error("destroying a finished task attempt", "task_id", id, "error", err)
	}
	tr.mu.Lock()
	tr.taskID, tr.running = "", false
	tr.mu.Unlock()
	tr.update(func(*pb.TaskState) {})
}

// Destroy runs the destroy hooks (reverse order). Call it once, after Run
// has returned, when the alloc is destroyed.
func (tr *TaskRunner) Destroy(ctx context.Context) {
	info := tr.currentInfo()
	tr.reverse(func(h runhooks.Hook) {
		if dh, ok := h.(runhooks.TaskDestroyHook); ok {
			hctx, cancel := tr.hookCtx(h)
			stop := context.AfterFunc(ctx, cancel)
			tr.teardownErr("destroy", h, dh.Destroy(hctx, &runhooks.TaskDestroyRequest{TaskInfo: info}))
			stop()
			cancel()
		}
	})
}
