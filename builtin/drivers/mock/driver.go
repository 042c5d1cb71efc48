package mock

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/version"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// Driver is the mock driver. Create it with New.
type Driver struct {
	logger hclog.Logger
	tasks  sdk.TaskStore[*task]
	events sdk.EventHub
	fp     *sdk.FingerprintHub

	mu         sync.Mutex
	attributes map[string]string
	unhealthy  *time.Timer
}

var _ sdk.Driver = (*Driver)(nil)

// New returns a mock driver, healthy until configured otherwise.
func New(logger hclog.Logger) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	d := &Driver{logger: logger.Named(Name)}
	d.fp = sdk.NewFingerprintHub(d.fingerprint(true, "", nil))
	return d
}

func (d *Driver) fingerprint(healthy bool, why string, extra map[string]string) *driverpb.DriverFingerprint {
	attrs := map[string]string{"driver.mock": "true", "driver.mock.version": version.Version}
	maps.Copy(attrs, extra)
	fp := &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_HEALTHY, HealthDescription: "healthy", Attributes: attrs}
	if !healthy {
		fp.Health, fp.HealthDescription = driverpb.Health_HEALTH_UNHEALTHY, why
	}
	return fp
}

// PluginInfo implements sdk.Driver.
func (d *Driver) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: Name, Version: version.Version}, nil
}

// Capabilities implements sdk.Driver.
func (d *Driver) Capabilities(context.Context) (*driverpb.DriverCapabilities, error) {
	// mount_volumes, though mock tasks touch no filesystem: it records the
	// mounts (MountsAttribute) so tests of berth and of sdk/drivertest can
	// check what reached a driver that honours mounts.
	return &driverpb.DriverCapabilities{SendSignals: true, FsIsolation: driverpb.FSIsolation_FS_ISOLATION_NONE, MountVolumes: true}, nil
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
	defer d.mu.Unlock()
	d.attributes = vals.Map("attributes")
	if d.unhealthy != nil {
		d.unhealthy.Stop()
		d.unhealthy = nil
	}
	d.fp.Set(d.fingerprint(true, "", d.attributes))
	if vals.Has("unhealthy_after") {
		after := vals.Duration("unhealthy_after")
		d.unhealthy = time.AfterFunc(after, func() {
			d.setUnhealthy(fmt.Sprintf("unhealthy_after %s elapsed", after))
		})
	}
	return nil
}

// crash takes the plugin process down the way a driver bug would: an
// unrecovered panic (it runs on a timer's goroutine).
func (d *Driver) crash(reason string) {
	d.logger.Error("crashing the plugin as configured", "reason", reason)
	panic("mock driver crash: " + reason)
}

func (d *Driver) setUnhealthy(why string) {
	d.mu.Lock()
	attrs := d.attributes
	d.mu.Unlock()
	d.logger.Info("driver turning unhealthy", "reason", why)
	d.fp.Set(d.fingerprint(false, why, attrs))
}

// Fingerprint implements sdk.Driver.
func (d *Driver) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return d.fp.Watch(ctx)
}

// TaskEvents implements sdk.Driver.
func (d *Driver) TaskEvents(ctx context.Context) iter.Seq2[*driverpb.TaskEvent, error] {
	return d.events.Subscribe(ctx)
}
