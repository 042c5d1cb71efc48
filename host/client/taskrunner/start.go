package taskrunner

import (
	"context"
	"errors"
	"fmt"

	"berth.dev/berth/internal/taskenv"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// start runs the prestart hooks and starts one attempt.
func (tr *TaskRunner) start(attempt int) (string, error) {
	info := tr.currentInfo()
	task := info.Task
	if attempt == 1 {
		tr.EmitEvent(tr.event("Task Setup", "Building task directory and environment", nil))
	}
	resp, err := tr.prestart(info, attempt, false)
	if err != nil {
		ev := tr.event("Setup Failure", err.Error(), nil)
		ev.Failed = true
		tr.EmitEvent(ev)
		return "", err
	}
	if tr.cfg.Driver == nil {
		err := tr.cfg.DriverErr
		if err == nil {
			err = fmt.Errorf("driver %q unknown", task.GetDriver())
		}
		ev := tr.event("Driver Failure", fmt.Sprintf("task %q: %v", task.GetName(), err), map[string]string{"reason": "driver-unavailable"})
		ev.Failed = true
		tr.EmitEvent(ev)
		return "", err
	}
	env := taskenv.FromMaps(resp.Env, resp.Vars)
	id := newTaskID(info.Alloc.GetId(), task.GetName())
	// Write-ahead: the attempt is recorded before the driver starts it, so
	// a restarted client looks for this attempt's handle and recovers it,
	// or, finding no handle, has the driver destroy the attempt (the
	// plugin may have started it) before starting another. An attempt that
	// cannot be recorded is not started.
	tr.mu.Lock()
	tr.taskID = id
	tr.newAttempt(id)
	tr.mu.Unlock()
	if err := tr.update(func(*pb.TaskState) {}); err != nil {
		tr.mu.Lock()
		tr.taskID = ""
		tr.mu.Unlock()
		err = fmt.Errorf("task %q: recording attempt %s in the client state db before starting it: %w", task.GetName(), id, err)
		ev := tr.event("Setup Failure", err.Error(), map[string]string{"reason": "state-not-persisted", "task_id": id})
		ev.Failed = true
		tr.EmitEvent(ev)
		return "", err
	}
	cfg := &driverpb.TaskConfig{
		Id: id, Name: task.GetName(), AllocId: info.Alloc.GetId(), JobId: info.Job.GetId(), Group: info.Group.GetName(),
		Env: env.Map(), TaskDir: info.Dir.Dir, LogDir: info.Dir.LogDir, Logs: logConfig(task),
		Resources: tr.resources(task), User: task.GetUser(), Mounts: resp.Mounts,
		DriverConfig: env.ReplaceConfig(task.GetConfig()),
	}
	// A kill during a slow start abandons it: the driver destroys what
	// it may have started.
	ctx, cancel := context.WithCancel(tr.ctx)
	stop := tr.cancelOnKill(ctx, cancel)
	_, err = tr.cfg.Driver.StartTask(ctx, cfg)
	stop()
	cancel()
	if err != nil {
		tr.mu.Lock()
		tr.taskID = ""
		tr.mu.Unlock()
		tr.EmitEvent(driverFailure(tr.event, task.GetName(), err))
		return "", err
	}
	tr.mu.Lock()
	tr.running = true
	tr.mu.Unlock()
	tr.update(func(st *pb.TaskState) {
		st.State = pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING
		st.StartedAt = tr.cfg.Now().UnixNano()
		st.FinishedAt = 0
		appendEvent(st, tr.event("Started", "Task started by client", map[string]string{"task_id": id}))
	})
	tr.poststart(info, id, false)
	return id, nil
}

// driverFailure is the event of a failed StartTask: the reason and path
// of a *sdk.StartError, the error's text otherwise.
func driverFailure(event func(string, string, map[string]string) *pb.TaskEvent, task string, err error) *pb.TaskEvent {
	details := map[string]string{"reason": "other"}
	var se *sdk.StartError
	if errors.As(err, &se) {
		details["reason"] = string(se.Reason)
		if se.Path != "" {
			details["path"] = se.Path
		}
	}
	ev := event("Driver Failure", fmt.Sprintf("task %q failed to start: %v", task, err), details)
	ev.Failed = true
	return ev
}

func logConfig(t *pb.Task) *driverpb.LogConfig {
	if l := t.GetLogs(); l.GetMaxFiles() > 0 && l.GetMaxFileSizeBytes() > 0 {
		return l
	}
	return &driverpb.LogConfig{MaxFiles: 10, MaxFileSizeBytes: 10 << 20}
}

func (tr *TaskRunner) resources(t *pb.Task) *driverpb.Resources {
	mhz := t.GetResources().GetCpuMhz()
	shares := mhz
	if tr.cfg.MHzPerCore > 0 {
		shares = mhz * 1024 / tr.cfg.MHzPerCore
	}
	return &driverpb.Resources{CpuShares: shares, MemoryBytes: t.GetResources().GetMemoryMb() << 20}
}
