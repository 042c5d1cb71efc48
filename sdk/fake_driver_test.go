package sdk

import (
	"context"
	"iter"
	"sync"
	"time"

	"berth.dev/berth/sdk/driverpb"
)

// fakeDriver is a hand-written Driver for the sdk's own tests: StartErr is
// returned by StartTask, tasks block in WaitTask until ctx ends, and the
// hubs are exposed so tests can publish.
type fakeDriver struct {
	name     string
	schemas  *driverpb.ConfigSchemas
	fp       *FingerprintHub
	events   EventHub
	tasks    TaskStore[*driverpb.TaskConfig]
	mu       sync.Mutex
	StartErr error
	Starts   int
	// MountVolumes is the mount_volumes capability it advertises.
	MountVolumes bool
}

var _ Driver = (*fakeDriver)(nil)

func newFakeDriver() *fakeDriver {
	return &fakeDriver{
		name:    "fake",
		schemas: &driverpb.ConfigSchemas{Plugin: &driverpb.Schema{}, Task: testSchema},
		fp:      NewFingerprintHub(&driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_HEALTHY}),
	}
}

func (f *fakeDriver) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: f.name, Version: "9.9.9"}, nil
}

func (f *fakeDriver) Capabilities(context.Context) (*driverpb.DriverCapabilities, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &driverpb.DriverCapabilities{SendSignals: true, MountVolumes: f.MountVolumes}, nil
}

func (f *fakeDriver) ConfigSchema(context.Context) (*driverpb.ConfigSchemas, error) {
	return f.schemas, nil
}

func (f *fakeDriver) SetConfig(_ context.Context, cfg *driverpb.PluginConfig) error {
	_, err := ConfigSpec{Plugin: f.name, Scope: ScopePlugin, Schema: f.schemas.GetPlugin()}.Validate(cfg.GetValues())
	return err
}

func (f *fakeDriver) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return f.fp.Watch(ctx)
}

func (f *fakeDriver) StartTask(_ context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	f.mu.Lock()
	f.Starts++
	err := f.StartErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, err := (ConfigSpec{Plugin: f.name, Scope: ScopeTaskConfig, Schema: testSchema}).Validate(cfg.GetDriverConfig()); err != nil {
		return nil, err
	}
	if err := f.tasks.Add(cfg.GetId(), cfg); err != nil {
		return nil, err
	}
	return &driverpb.TaskHandle{Driver: f.name, Config: cfg}, nil
}

func (f *fakeDriver) WaitTask(ctx context.Context, taskID string) (*driverpb.ExitResult, error) {
	if _, err := f.tasks.Get(taskID); err != nil {
		return nil, err
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeDriver) StopTask(_ context.Context, taskID string, _ time.Duration, _ string) error {
	_, err := f.tasks.Get(taskID)
	return err
}

func (f *fakeDriver) DestroyTask(_ context.Context, taskID string, _ bool) error {
	f.tasks.Delete(taskID)
	return nil
}

func (f *fakeDriver) InspectTask(_ context.Context, taskID string) (*driverpb.TaskStatus, error) {
	cfg, err := f.tasks.Get(taskID)
	if err != nil {
		return nil, err
	}
	return &driverpb.TaskStatus{Id: cfg.GetId(), State: driverpb.TaskState_TASK_STATE_RUNNING}, nil
}

func (f *fakeDriver) RecoverTask(context.Context, *driverpb.TaskHandle) error {
	return ErrInvalidHandle
}

func (f *fakeDriver) SignalTask(_ context.Context, taskID, signal string) error {
	if _, err := ParseSignal(signal); err != nil {
		return err
	}
	_, err := f.tasks.Get(taskID)
	return err
}

func (f *fakeDriver) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	return f.events.Subscribe(ctx)
}
