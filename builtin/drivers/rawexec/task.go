package rawexec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// task is one raw_exec task: its config and its executor.
type task struct {
	cfg       *driverpb.TaskConfig
	startedAt time.Time
	// proc is nil while StartTask is still starting the executor.
	proc atomic.Pointer[executor.Process]
	// gone is closed when the driver forgets the task, ending its watcher.
	gone     chan struct{}
	goneOnce sync.Once
}

func newTask(cfg *driverpb.TaskConfig, startedAt time.Time) *task {
	return &task{cfg: proto.Clone(cfg).(*driverpb.TaskConfig), startedAt: startedAt, gone: make(chan struct{})}
}

// forget stops watching the task's executor; the process is unaffected.
func (t *task) forget() {
	t.goneOnce.Do(func() {
		if p := t.proc.Load(); p != nil {
			p.Close()
		}
		close(t.gone)
	})
}

// watch publishes the task's exit as an event.
func (d *Driver) watch(t *task) {
	proc := t.proc.Load()
	select {
	case <-proc.Done():
		exit, _ := proc.Wait(context.Background())
		ann := map[string]string{"exit_code": strconv.Itoa(exit.ExitCode)}
		msg := fmt.Sprintf("task exited with code %d", exit.ExitCode)
		if exit.Signal != 0 {
			ann["signal"] = strconv.Itoa(exit.Signal)
			msg = fmt.Sprintf("task killed by signal %d", exit.Signal)
		}
		if exit.Err != "" {
			msg += ": " + exit.Err
		}
		d.events.Emit(t.cfg.GetId(), msg, ann)
	case <-t.gone:
	}
}

// abandonedDestroyTimeout bounds the clean-up of a start whose caller gave up.
const abandonedDestroyTimeout = 30 * time.Second

// StartTask implements sdk.Driver.
func (d *Driver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	if !d.isEnabled() {
		return nil, fmt.Errorf("start task %q: %w: %s", cfg.GetId(), sdk.ErrDriverUnhealthy, disabledDescription)
	}
	spec, err := buildSpec(cfg)
	if err != nil {
		return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), err)
	}
	self, err := d.executorCommand()
	if err != nil {
		return nil, err
	}
	// Reserve the ID before starting, so two starts of one ID cannot race.
	t := newTask(cfg, time.Now())
	if err := d.tasks.Add(cfg.GetId(), t); err != nil {
		return nil, err
	}
	proc, err := executor.Start(ctx, self, *spec, d.logger.With("task_id", cfg.GetId()))
	if err != nil {
		d.tasks.Delete(cfg.GetId())
		return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), startError(err))
	}
	t.proc.Store(proc)
	if err := ctx.Err(); err != nil {
		// The caller gave up while the executor started: it will neither
		// get nor persist the handle, so the task must not run on.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonedDestroyTimeout)
		defer cancel()
		if derr := d.DestroyTask(dctx, cfg.GetId(), true); derr != nil {
			d.logger.Error("start abandoned by its caller, and its task could not be destroyed", "task_id", cfg.GetId(), "error", derr)
		}
		return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), err)
	}
	h, err := encodeHandle(t)
	if err != nil {
		proc.Kill()
		d.tasks.Delete(cfg.GetId())
		return nil, err
	}
	go d.watch(t)
	d.logger.Info("task started", "task_id", cfg.GetId(), "pid", proc.Pid(), "command", spec.Path)
	d.events.Emit(cfg.GetId(), fmt.Sprintf("task started (pid %d)", proc.Pid()), map[string]string{"pid": strconv.Itoa(proc.Pid())})
	return h, nil
}

// startError maps the executor's account of a task that did not start to
// the sdk's, which crosses the plugin wire with its reason and path; other
// errors (the executor's own) are returned as they are.
func startError(err error) error {
	var xe *executor.StartError
	if !errors.As(err, &xe) {
		return err
	}
	reason := sdk.StartOther
	switch xe.Kind {
	case executor.StartNotFound:
		reason = sdk.StartNotFound
	case executor.StartPermissionDenied:
		reason = sdk.StartPermissionDenied
	case executor.StartBadWorkingDir:
		reason = sdk.StartBadWorkingDir
	}
	return &sdk.StartError{Reason: reason, Path: xe.Path, Detail: xe.Detail}
}

// get returns a task that has finished starting, and its process.
func (d *Driver) get(taskID string) (*task, *executor.Process, error) {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return nil, nil, err
	}
	proc := t.proc.Load()
	if proc == nil {
		// Its StartTask is still running; to the caller it does not exist yet.
		return nil, nil, fmt.Errorf("task %q is starting: %w", taskID, sdk.ErrTaskNotFound)
	}
	return t, proc, nil
}

// WaitTask implements sdk.Driver.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	_, proc, err := d.get(taskID)
	if err != nil {
		return nil, err
	}
	exit, err := proc.Wait(ctx)
	if err != nil {
		return nil, err
	}
	return exit.Result(), nil
}

func exited(p *executor.Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// StopTask implements sdk.Driver.
func (d *Driver) StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error {
	_, proc, err := d.get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if err := proc.Signal(sig); err != nil && !errors.Is(err, executor.ErrExited) {
		return fmt.Errorf("stop task %q: %w", taskID, err)
	}
	timer := time.NewTimer(max(timeout, 0))
	defer timer.Stop()
	select {
	case <-proc.Done():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}
	d.logger.Info("task did not stop in time, killing it", "task_id", taskID, "signal", sdk.SignalName(sig), "timeout", timeout)
	d.events.Emit(taskID, fmt.Sprintf("task ignored %s for %s; killing it", sdk.SignalName(sig), timeout), nil)
	if err := proc.Kill(); err != nil && !errors.Is(err, executor.ErrExited) {
		return fmt.Errorf("kill task %q: %w", taskID, err)
	}
	_, err = proc.Wait(ctx)
	return err
}

// DestroyTask implements sdk.Driver.
func (d *Driver) DestroyTask(ctx context.Context, taskID string, force bool) error {
	t, proc, err := d.get(taskID)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		return nil
	}
	if !exited(proc) {
		if !force {
			return fmt.Errorf("destroy task %q: %w", taskID, sdk.ErrTaskRunning)
		}
		if err := proc.Kill(); err != nil && !errors.Is(err, executor.ErrExited) {
			return fmt.Errorf("destroy task %q: %w", taskID, err)
		}
		if _, err := proc.Wait(ctx); err != nil {
			return fmt.Errorf("destroy task %q: waiting for it to die: %w", taskID, err)
		}
	}
	t.forget()
	d.tasks.Delete(taskID)
	dir := stateDir(t.cfg)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("destroy task %q: %w", taskID, err)
	}
	os.Remove(filepath.Dir(dir)) // only succeeds once no task state is left
	return nil
}

// InspectTask implements sdk.Driver.
func (d *Driver) InspectTask(_ context.Context, taskID string) (*driverpb.TaskStatus, error) {
	t, proc, err := d.get(taskID)
	if err != nil {
		return nil, err
	}
	st := &driverpb.TaskStatus{
		Id: taskID, Name: t.cfg.GetName(), State: driverpb.TaskState_TASK_STATE_RUNNING,
		StartedAt:  t.startedAt.UnixNano(),
		Attributes: map[string]string{"pid": strconv.Itoa(proc.Pid())},
	}
	if exited(proc) {
		exit, _ := proc.Wait(context.Background())
		st.State = driverpb.TaskState_TASK_STATE_EXITED
		st.ExitResult = exit.Result()
		st.CompletedAt = exit.FinishedAt
	}
	return st, nil
}

// SignalTask implements sdk.Driver.
func (d *Driver) SignalTask(_ context.Context, taskID, signal string) error {
	_, proc, err := d.get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if err := proc.Signal(sig); err != nil {
		if errors.Is(err, executor.ErrExited) {
			return fmt.Errorf("signal task %q: %w", taskID, sdk.ErrTaskNotRunning)
		}
		return fmt.Errorf("signal task %q: %w", taskID, err)
	}
	d.events.Emit(taskID, "sent "+sdk.SignalName(sig), map[string]string{"signal": sdk.SignalName(sig)})
	return nil
}
