package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// handleVersion is the version of driverState in handles.
const handleVersion = 1

// driverState is what a handle carries besides the task config.
type driverState struct {
	StartedAt int64 `json:"started_at"`
}

// task is one mock task: a timer and how it will end.
type task struct {
	cfg       *driverpb.TaskConfig
	vals      *sdk.Values
	startedAt time.Time

	mu       sync.Mutex
	exit     *driverpb.ExitResult
	done     chan struct{}
	timers   []*time.Timer
	signals  []string
	finished time.Time
}

func newTask(cfg *driverpb.TaskConfig, vals *sdk.Values, startedAt time.Time) *task {
	return &task{cfg: cfg, vals: vals, startedAt: startedAt, done: make(chan struct{})}
}

// finish records how the task ended; the first call wins.
func (t *task) finish(res *driverpb.ExitResult) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit != nil {
		return false
	}
	t.finished = time.Now()
	res.FinishedAt = t.finished.UnixNano()
	t.exit = res
	for _, tm := range t.timers {
		tm.Stop()
	}
	close(t.done)
	return true
}

func (t *task) after(d time.Duration, f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit == nil {
		t.timers = append(t.timers, time.AfterFunc(d, f))
	}
}

func (t *task) exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// configuredExit is how the task ends when run_for elapses.
func (t *task) configuredExit() *driverpb.ExitResult {
	res := &driverpb.ExitResult{ExitCode: int32(t.vals.Int("exit_code")), Err: t.vals.String("exit_error")}
	if name := t.vals.String("exit_signal"); name != "" {
		sig, _ := sdk.ParseSignal(name) // checked in validate
		res.Signal, res.ExitCode = int32(sig), 128+int32(sig)
	}
	return res
}

func killedBy(sig syscall.Signal) *driverpb.ExitResult {
	return &driverpb.ExitResult{ExitCode: 128 + int32(sig), Signal: int32(sig)}
}

// terminates reports whether sig ends the task, as default dispositions would.
func (t *task) terminates(sig syscall.Signal) bool {
	if sig == syscall.SIGKILL {
		return true
	}
	if t.vals.Bool("ignore_stop_signal") {
		return false
	}
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP:
		return true
	}
	return false
}

func validate(cfg *driverpb.TaskConfig) (*sdk.Values, error) {
	vals, err := taskSpec().Validate(cfg.GetDriverConfig())
	if err != nil {
		return nil, err
	}
	if name := vals.String("exit_signal"); name != "" {
		if _, err := sdk.ParseSignal(name); err != nil {
			return nil, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: "exit_signal", Problem: err.Error()}
		}
	}
	return vals, nil
}

// StartTask implements sdk.Driver.
func (d *Driver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	vals, err := validate(cfg)
	if err != nil {
		return nil, err
	}
	if vals.Has("start_block_for") {
		select {
		case <-time.After(vals.Duration("start_block_for")):
		case <-ctx.Done():
			return nil, fmt.Errorf("start task %q: %w", cfg.GetId(), ctx.Err())
		}
	}
	if msg := vals.String("start_error"); msg != "" {
		return nil, fmt.Errorf("start task %q: %s", cfg.GetId(), msg)
	}
	t := newTask(proto.Clone(cfg).(*driverpb.TaskConfig), vals, time.Now())
	if err := d.tasks.Add(cfg.GetId(), t); err != nil {
		return nil, err
	}
	d.schedule(t, false)
	if vals.Has("crash_plugin_after") {
		after := vals.Duration("crash_plugin_after")
		t.after(after, func() { d.crash(fmt.Sprintf("task %s: crash_plugin_after %s elapsed", cfg.GetId(), after)) })
	}
	return d.handle(t)
}

// schedule arms the task's timers: its exit, and the driver turning
// unhealthy. A recovered task's run_for counts from its original start.
func (d *Driver) schedule(t *task, recovered bool) {
	if t.vals.Has("run_for") {
		remaining := time.Until(t.startedAt.Add(t.vals.Duration("run_for")))
		t.after(max(remaining, 0), func() { d.finish(t, t.configuredExit(), "run_for elapsed") })
	}
	if t.vals.Has("driver_unhealthy_after") && !recovered {
		after := t.vals.Duration("driver_unhealthy_after")
		t.after(after, func() {
			d.setUnhealthy(fmt.Sprintf("task %s: driver_unhealthy_after %s elapsed", t.cfg.GetId(), after))
		})
	}
}

func (d *Driver) finish(t *task, res *driverpb.ExitResult, why string) {
	// The runner records the exit (its Terminated event); an event here
	// would repeat it, so the reason goes to the log.
	if t.finish(res) {
		d.logger.Debug("task exited", "task_id", t.cfg.GetId(), "why", why, "exit_code", res.GetExitCode())
	}
}

func (d *Driver) handle(t *task) (*driverpb.TaskHandle, error) {
	state, err := json.Marshal(driverState{StartedAt: t.startedAt.UnixNano()})
	if err != nil {
		return nil, err
	}
	st := driverpb.TaskState_TASK_STATE_RUNNING
	if t.exited() {
		st = driverpb.TaskState_TASK_STATE_EXITED
	}
	return &driverpb.TaskHandle{
		Version: handleVersion, Driver: Name, Config: t.cfg, State: st,
		DriverState: state, StartedAt: t.startedAt.UnixNano(),
	}, nil
}

// WaitTask implements sdk.Driver.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return proto.Clone(t.exit).(*driverpb.ExitResult), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// StopTask implements sdk.Driver.
func (d *Driver) StopTask(ctx context.Context, taskID string, timeout time.Duration, signal string) error {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if t.exited() {
		return nil
	}
	if t.terminates(sig) {
		d.finish(t, killedBy(sig), "stopped with "+sdk.SignalName(sig))
	} else {
		d.events.Emit(taskID, "stop signal "+sdk.SignalName(sig)+" ignored", nil)
		select {
		case <-t.done:
		case <-time.After(timeout):
			d.finish(t, killedBy(syscall.SIGKILL), "killed after stop timeout")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// DestroyTask implements sdk.Driver.
func (d *Driver) DestroyTask(_ context.Context, taskID string, force bool) error {
	t, err := d.tasks.Get(taskID)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		return nil
	}
	if !t.exited() {
		if !force {
			return fmt.Errorf("destroy task %q: %w", taskID, sdk.ErrTaskRunning)
		}
		d.finish(t, killedBy(syscall.SIGKILL), "destroyed")
	}
	d.tasks.Delete(taskID)
	return nil
}

// InspectTask implements sdk.Driver.
func (d *Driver) InspectTask(_ context.Context, taskID string) (*driverpb.TaskStatus, error) {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := &driverpb.TaskStatus{
		Id: taskID, Name: t.cfg.GetName(), State: driverpb.TaskState_TASK_STATE_RUNNING,
		StartedAt:  t.startedAt.UnixNano(),
		Attributes: map[string]string{"signals": strings.Join(t.signals, ","), MountsAttribute: encodeMounts(t.cfg.GetMounts())},
	}
	if t.exit != nil {
		st.State = driverpb.TaskState_TASK_STATE_EXITED
		st.CompletedAt = t.finished.UnixNano()
		st.ExitResult = proto.Clone(t.exit).(*driverpb.ExitResult)
	}
	return st, nil
}

// RecoverTask implements sdk.Driver.
func (d *Driver) RecoverTask(_ context.Context, h *driverpb.TaskHandle) error {
	if h.GetDriver() != Name || h.GetVersion() != handleVersion {
		return fmt.Errorf("%w: driver %q version %d, want %q version %d",
			sdk.ErrInvalidHandle, h.GetDriver(), h.GetVersion(), Name, handleVersion)
	}
	var st driverState
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		return fmt.Errorf("%w: driver state: %v", sdk.ErrInvalidHandle, err)
	}
	cfg := h.GetConfig()
	if err := sdk.ValidateTaskConfig(Name, cfg); err != nil {
		return fmt.Errorf("%w: %v", sdk.ErrInvalidHandle, err)
	}
	vals, err := validate(cfg)
	if err != nil {
		return fmt.Errorf("%w: %v", sdk.ErrInvalidHandle, err)
	}
	t := newTask(proto.Clone(cfg).(*driverpb.TaskConfig), vals, time.Unix(0, st.StartedAt))
	if _, added := d.tasks.AddIfAbsent(cfg.GetId(), t); !added {
		return nil
	}
	d.schedule(t, true)
	return nil
}

// SignalTask implements sdk.Driver.
func (d *Driver) SignalTask(_ context.Context, taskID, signal string) error {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return err
	}
	sig, err := sdk.ParseSignal(signal)
	if err != nil {
		return err
	}
	if t.exited() {
		return fmt.Errorf("signal task %q: %w", taskID, sdk.ErrTaskNotRunning)
	}
	name := sdk.SignalName(sig)
	t.mu.Lock()
	t.signals = append(t.signals, name)
	t.mu.Unlock()
	d.events.Emit(taskID, "received "+name, map[string]string{"signal": name})
	if t.terminates(sig) {
		d.finish(t, killedBy(sig), "killed by "+name)
	}
	return nil
}
