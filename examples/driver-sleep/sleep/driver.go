package sleep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Name is the driver's name in job specs.
const Name = "sleep"

// Version is the driver's version.
const Version = "1.0.0"

var pluginSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "max_duration", Type: sdk.TypeDuration, Description: "refuse tasks that would sleep longer"},
}}

var taskSchema = &driverpb.Schema{Fields: []*driverpb.Field{
	{Name: "duration", Type: sdk.TypeDuration, Required: true, Description: "how long the task sleeps"},
	{Name: "exit_code", Type: sdk.TypeInt, Default: sdk.IntValue(0), Description: "exit code when it wakes"},
}}

// Driver is the sleep driver. Create it with New.
type Driver struct {
	logger hclog.Logger
	tasks  sdk.TaskStore[*task]
	events sdk.EventHub
	fp     *sdk.FingerprintHub

	mu          sync.Mutex
	maxDuration time.Duration // 0: no limit
}

var _ sdk.Driver = (*Driver)(nil)

// New returns a sleep driver.
func New(logger hclog.Logger) *Driver {
	return &Driver{
		logger: logger,
		fp: sdk.NewFingerprintHub(&driverpb.DriverFingerprint{
			Health:            driverpb.Health_HEALTH_HEALTHY,
			HealthDescription: "healthy",
			Attributes:        map[string]string{"driver.sleep.version": Version},
		}),
	}
}

// task is a sleeping task.
type task struct {
	cfg       *driverpb.TaskConfig
	startedAt time.Time
	timer     *time.Timer

	mu   sync.Mutex
	exit *driverpb.ExitResult
	done chan struct{}
}

// end records how the task ended; the first caller wins.
func (t *task) end(res *driverpb.ExitResult) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit != nil {
		return false
	}
	res.FinishedAt = time.Now().UnixNano()
	t.exit = res
	t.timer.Stop()
	close(t.done)
	return true
}

func (t *task) result() *driverpb.ExitResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exit == nil {
		return nil
	}
	return proto.Clone(t.exit).(*driverpb.ExitResult)
}

// PluginInfo implements sdk.Driver.
func (d *Driver) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: Name, Version: Version}, nil
}

// Capabilities implements sdk.Driver.
func (d *Driver) Capabilities(context.Context) (*driverpb.DriverCapabilities, error) {
	return &driverpb.DriverCapabilities{SendSignals: true, FsIsolation: driverpb.FSIsolation_FS_ISOLATION_NONE}, nil
}

// ConfigSchema implements sdk.Driver.
func (d *Driver) ConfigSchema(context.Context) (*driverpb.ConfigSchemas, error) {
	return &driverpb.ConfigSchemas{Plugin: pluginSchema, Task: taskSchema}, nil
}

// SetConfig implements sdk.Driver.
func (d *Driver) SetConfig(_ context.Context, cfg *driverpb.PluginConfig) error {
	vals, err := sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopePlugin, Schema: pluginSchema}.Validate(cfg.GetValues())
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.maxDuration = vals.Duration("max_duration")
	d.mu.Unlock()
	return nil
}

// Fingerprint implements sdk.Driver.
func (d *Driver) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return d.fp.Watch(ctx)
}

// TaskEvents implements sdk.Driver.
func (d *Driver) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	return d.events.Subscribe(ctx)
}

// values validates a task's config, including the plugin's limit.
func (d *Driver) values(cfg *driverpb.TaskConfig) (*sdk.Values, error) {
	vals, err := sdk.ConfigSpec{Plugin: Name, Scope: sdk.ScopeTaskConfig, Schema: taskSchema}.Validate(cfg.GetDriverConfig())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	limit := d.maxDuration
	d.mu.Unlock()
	if dur := vals.Duration("duration"); dur < 0 || (limit > 0 && dur > limit) {
		return nil, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTaskConfig, Key: "duration",
			Problem: fmt.Sprintf("%s is not between 0 and max_duration %s", dur, limit)}
	}
	return vals, nil
}

// run registers a task and sets its alarm; startedAt may be in the past
// for a recovered task.
func (d *Driver) run(cfg *driverpb.TaskConfig, vals *sdk.Values, startedAt time.Time, recovering bool) error {
	t := &task{cfg: proto.Clone(cfg).(*driverpb.TaskConfig), startedAt: startedAt, done: make(chan struct{})}
	wake := max(time.Until(startedAt.Add(vals.Duration("duration"))), 0)
	code := int32(vals.Int("exit_code"))
	t.mu.Lock() // the timer may fire before it is stored in t
	t.timer = time.AfterFunc(wake, func() {
		if t.end(&driverpb.ExitResult{ExitCode: code}) {
			d.events.Emit(cfg.GetId(), "woke up", nil)
		}
	})
	t.mu.Unlock()
	if recovering {
		if _, added := d.tasks.AddIfAbsent(cfg.GetId(), t); !added {
			t.timer.Stop()
		}
		return nil
	}
	if err := d.tasks.Add(cfg.GetId(), t); err != nil {
		t.timer.Stop()
		return err
	}
	d.events.Emit(cfg.GetId(), "fell asleep", nil)
	return nil
}

// handleState is the driver's part of a task handle.
type handleState struct {
	StartedAt int64 `json:"started_at"`
}

// StartTask implements sdk.Driver.
func (d *Driver) StartTask(_ context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	vals, err := d.values(cfg)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if err := d.run(cfg, vals, now, false); err != nil {
		return nil, err
	}
	state, err := json.Marshal(handleState{StartedAt: now.UnixNano()})
	if err != nil {
		return nil, err
	}
	return &driverpb.TaskHandle{
		Version: 1, Driver: Name, Config: cfg, State: driverpb.TaskState_TASK_STATE_RUNNING,
		DriverState: state, StartedAt: now.UnixNano(),
	}, nil
}

// RecoverTask implements sdk.Driver.
func (d *Driver) RecoverTask(_ context.Context, h *driverpb.TaskHandle) error {
	if h.GetDriver() != Name || h.GetVersion() != 1 {
		return fmt.Errorf("%w: from driver %q version %d", sdk.ErrInvalidHandle, h.GetDriver(), h.GetVersion())
	}
	var st handleState
	if err := json.Unmarshal(h.GetDriverState(), &st); err != nil {
		return fmt.Errorf("%w: %v", sdk.ErrInvalidHandle, err)
	}
	vals, err := d.values(h.GetConfig())
	if err != nil {
		return fmt.Errorf("%w: %v", sdk.ErrInvalidHandle, err)
	}
	return d.run(h.GetConfig(), vals, time.Unix(0, st.StartedAt), true)
}

// WaitTask implements sdk.Driver.
func (d *Driver) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	t, err := d.tasks.Get(taskID)
	if err != nil {
		return nil, err
	}
	select {
	case <-t.done:
		return t.result(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// killedBy ends t as if a signal killed it, if sig would.
func (d *Driver) killedBy(t *task, sig syscall.Signal) bool {
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGKILL:
		if t.end(&driverpb.ExitResult{ExitCode: 128 + int32(sig), Signal: int32(sig)}) {
			d.events.Emit(t.cfg.GetId(), "killed by "+sdk.SignalName(sig), nil)
		}
		return true
	}
	return false
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
	if d.killedBy(t, sig) {
		return nil
	}
	select {
	case <-t.done:
	case <-time.After(timeout):
		d.killedBy(t, syscall.SIGKILL)
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// DestroyTask implements sdk.Driver.
func (d *Driver) DestroyTask(_ context.Context, taskID string, force bool) error {
	t, err := d.tasks.Get(taskID)
	if errors.Is(err, sdk.ErrTaskNotFound) {
		return nil
	}
	if t.result() == nil {
		if !force {
			return fmt.Errorf("destroy %q: %w", taskID, sdk.ErrTaskRunning)
		}
		d.killedBy(t, syscall.SIGKILL)
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
	st := &driverpb.TaskStatus{
		Id: taskID, Name: t.cfg.GetName(), State: driverpb.TaskState_TASK_STATE_RUNNING,
		StartedAt: t.startedAt.UnixNano(),
	}
	if res := t.result(); res != nil {
		st.State, st.ExitResult, st.CompletedAt = driverpb.TaskState_TASK_STATE_EXITED, res, res.GetFinishedAt()
	}
	return st, nil
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
	if t.result() != nil {
		return fmt.Errorf("signal %q: %w", taskID, sdk.ErrTaskNotRunning)
	}
	if !d.killedBy(t, sig) {
		d.events.Emit(taskID, "received "+sdk.SignalName(sig), nil)
	}
	return nil
}
