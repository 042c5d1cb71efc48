package rawexec

import (
	"context"
	"fmt"
	"iter"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// disabledDescription is the fingerprint's explanation while disabled.
const disabledDescription = "raw_exec is disabled: it runs tasks unisolated, as the agent's user; " +
	"set enabled = true in its plugin config to allow it"

// Driver is the raw_exec driver. Create it with New. Its task lifecycle
// (wait, stop, destroy, inspect, signal, recover, events) is the shared
// taskexec.Core's.
type Driver struct {
	*taskexec.Core
	logger hclog.Logger
	fp     *sdk.FingerprintHub

	mu      sync.Mutex
	enabled bool
}

var (
	_ sdk.Driver      = (*Driver)(nil)
	_ sdk.ExecDriver  = (*Driver)(nil)
	_ sdk.StatsDriver = (*Driver)(nil)
)

// New returns a raw_exec driver, disabled until SetConfig enables it.
func New(logger hclog.Logger) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	d := &Driver{logger: logger.Named(Name)}
	d.Core = taskexec.New(Name, stateSubdir, flavor{}, d.logger)
	// Each start after the first takes an executor started ahead
	// (taskexec's core_standby.go): a raw_exec task's start no longer waits
	// for the plugin binary's re-execution (issue 26: half of a volume
	// move's task start). Shutdown ends the one left.
	d.Core.EnableStandby()
	d.fp = sdk.NewFingerprintHub(fingerprint(false))
	return d
}

func fingerprint(enabled bool) *driverpb.DriverFingerprint {
	if !enabled {
		return &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_UNDETECTED, HealthDescription: disabledDescription}
	}
	return &driverpb.DriverFingerprint{
		Health:            driverpb.Health_HEALTH_HEALTHY,
		HealthDescription: "healthy",
		Attributes:        map[string]string{"driver.raw_exec": "true", "driver.raw_exec.version": version.Version},
	}
}

// PluginInfo implements sdk.Driver.
func (d *Driver) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: Name, Version: version.Version}, nil
}

// Capabilities implements sdk.Driver. mount_volumes stays off: raw_exec
// does not isolate, so it has nowhere to mount into; its tasks get host
// paths instead, and berth refuses a task with mounts here.
func (d *Driver) Capabilities(context.Context) (*driverpb.DriverCapabilities, error) {
	return &driverpb.DriverCapabilities{
		SendSignals: true, Exec: true, Stats: true,
		FsIsolation: driverpb.FSIsolation_FS_ISOLATION_NONE,
	}, nil
}

// ConfigSchema implements sdk.Driver.
func (d *Driver) ConfigSchema(context.Context) (*driverpb.ConfigSchemas, error) {
	return &driverpb.ConfigSchemas{Plugin: pluginSchema, Task: taskSchema}, nil
}

// SetConfig implements sdk.Driver.
func (d *Driver) SetConfig(_ context.Context, cfg *driverpb.PluginConfig) error {
	vals, err := pluginSpec().Validate(cfg.GetValues())
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.enabled = vals.Bool("enabled")
	enabled := d.enabled
	d.mu.Unlock()
	d.fp.Set(fingerprint(enabled))
	return nil
}

func (d *Driver) isEnabled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.enabled
}

// Fingerprint implements sdk.Driver.
func (d *Driver) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return d.fp.Watch(ctx)
}

// StartTask implements sdk.Driver: the shared lifecycle's, once the
// operator has enabled raw_exec.
func (d *Driver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	if !d.isEnabled() {
		return nil, fmt.Errorf("start task %q: %w: %s", cfg.GetId(), sdk.ErrDriverUnhealthy, disabledDescription)
	}
	return d.Core.StartTask(ctx, cfg)
}

// flavor is raw_exec's part of the shared lifecycle: a plain spec, nothing
// to set up or release, nothing to add to an exit.
type flavor struct{}

func (flavor) Prepare(cfg *driverpb.TaskConfig) (*executor.Spec, error) { return buildSpec(cfg) }
func (flavor) Release(*driverpb.TaskConfig) error                       { return nil }
func (flavor) Exited(*driverpb.TaskConfig, *driverpb.ExitResult)        {}

// Shutdown ends the executor started ahead of the next task, within ctx
// (Close bounds its own wait too); the plugin process is about to exit.
func (d *Driver) Shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		d.CloseStandby()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		d.logger.Warn("the executor started ahead of the next task did not end in time", "error", ctx.Err())
	}
}
