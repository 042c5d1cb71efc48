package execdriver

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"strconv"
	"sync"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/executor"
)

// disabledDescription is the fingerprint's explanation while disabled.
const disabledDescription = "exec is disabled: set enabled = true in its plugin config to allow it"

// Driver is the exec driver. Create it with New. Its task lifecycle is the
// shared taskexec.Core's; Driver adds the isolation.
type Driver struct {
	*taskexec.Core
	logger hclog.Logger
	fp     *sdk.FingerprintHub
	// euid is the plugin's effective user; exec needs 0.
	euid int

	mu     sync.Mutex
	config pluginConfig
	// cgroups is nil where none can be used (detectErr says why).
	cgroups   *cgroupDriver
	detectErr error
	// removeCgroup removes a task's cgroup (cgroups.remove; tests
	// replace it); releases runs it in the background.
	removeCgroup func(taskID string) error
	releases     cgroupReleases
}

var (
	_ sdk.Driver      = (*Driver)(nil)
	_ sdk.StatsDriver = (*Driver)(nil)
	_ sdk.ExecDriver  = (*Driver)(nil)
	_ taskexec.Flavor = (*flavor)(nil)
)

// New returns an exec driver, disabled until SetConfig enables it.
func New(logger hclog.Logger) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	d := &Driver{logger: logger.Named(Name), euid: os.Geteuid()}
	d.cgroups, d.detectErr = detectCgroups()
	d.removeCgroup = d.cgroups.remove
	d.config, _ = parsePluginConfig(&driverpb.PluginConfig{})
	d.Core = taskexec.New(Name, stateSubdir, &flavor{d: d}, d.logger)
	// Each start takes an executor and namespace init started ahead
	// (taskexec's core_standby.go); Shutdown ends the one left.
	d.Core.EnableStandby()
	d.fp = sdk.NewFingerprintHub(d.fingerprint())
	return d
}

// unusable says why exec cannot run tasks here, or "".
func (d *Driver) unusable() string {
	switch {
	case d.euid != 0:
		return fmt.Sprintf("exec requires root: it creates namespaces, mounts and cgroups, and the plugin runs as uid %d", d.euid)
	case d.detectErr != nil:
		return "exec requires cgroups: " + d.detectErr.Error()
	}
	return ""
}

func (d *Driver) fingerprint() *driverpb.DriverFingerprint {
	d.mu.Lock()
	enabled := d.config.enabled
	d.mu.Unlock()
	if !enabled {
		return &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_UNDETECTED, HealthDescription: disabledDescription}
	}
	if why := d.unusable(); why != "" {
		return &driverpb.DriverFingerprint{Health: driverpb.Health_HEALTH_UNHEALTHY, HealthDescription: why}
	}
	return &driverpb.DriverFingerprint{
		Health:            driverpb.Health_HEALTH_HEALTHY,
		HealthDescription: "healthy",
		Attributes: map[string]string{
			"driver.exec": "true", "driver.exec.version": version.Version,
			"driver.exec.cgroup_version": strconv.Itoa(d.cgroups.version()),
		},
	}
}

// PluginInfo implements sdk.Driver.
func (d *Driver) PluginInfo(context.Context) (*driverpb.PluginInfo, error) {
	return &driverpb.PluginInfo{Name: Name, Version: version.Version}, nil
}

// Capabilities implements sdk.Driver. exec honours mounts (API version
// 2): it binds each into the task's root with its propagation.
func (d *Driver) Capabilities(context.Context) (*driverpb.DriverCapabilities, error) {
	return &driverpb.DriverCapabilities{
		SendSignals: true, Exec: true, Stats: true, MountVolumes: true,
		FsIsolation: driverpb.FSIsolation_FS_ISOLATION_CHROOT,
	}, nil
}

// ConfigSchema implements sdk.Driver.
func (d *Driver) ConfigSchema(context.Context) (*driverpb.ConfigSchemas, error) {
	return &driverpb.ConfigSchemas{Plugin: pluginSchema, Task: taskSchema}, nil
}

// SetConfig implements sdk.Driver.
func (d *Driver) SetConfig(_ context.Context, cfg *driverpb.PluginConfig) error {
	pc, err := parsePluginConfig(cfg)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.config = pc
	d.mu.Unlock()
	d.fp.Set(d.fingerprint())
	return nil
}

func (d *Driver) pluginConfig() pluginConfig {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.config
}

// Fingerprint implements sdk.Driver.
func (d *Driver) Fingerprint(ctx context.Context) iter.Seq2[*driverpb.DriverFingerprint, error] {
	return d.fp.Watch(ctx)
}

// StartTask implements sdk.Driver: the shared lifecycle's, once exec is
// enabled and can run here.
func (d *Driver) StartTask(ctx context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	if !d.pluginConfig().enabled {
		return nil, fmt.Errorf("start task %q: %w: %s", cfg.GetId(), sdk.ErrDriverUnhealthy, disabledDescription)
	}
	if why := d.unusable(); why != "" {
		return nil, fmt.Errorf("start task %q: %w: %s", cfg.GetId(), sdk.ErrDriverUnhealthy, why)
	}
	return d.Core.StartTask(ctx, cfg)
}

// flavor is exec's part of the shared lifecycle.
type flavor struct{ d *Driver }

// Prepare implements taskexec.Flavor: the task's cgroup and shared mount
// sources, and an isolated spec.
func (f *flavor) Prepare(cfg *driverpb.TaskConfig) (*executor.Spec, error) {
	d := f.d
	if cfg.GetTaskDir() == "" {
		return nil, &sdk.ConfigError{Plugin: Name, Scope: sdk.ScopeTask, Key: "task_dir", Problem: "exec needs a task directory (it becomes the task's root)"}
	}
	pc, stateDir := d.pluginConfig(), d.StateDir(cfg)
	// The config is checked before anything is set up on the host.
	if _, err := buildSpec(cfg, pc, stateDir, nil, nil); err != nil {
		return nil, err
	}
	mounts, err := taskBinds(cfg, stateDir)
	if err != nil {
		return nil, err
	}
	d.cgroupReleased(cfg.GetId()) // an earlier task of this ID's, in the background
	procs, err := d.cgroups.create(cfg.GetId(), cfg.GetResources())
	if err != nil {
		return nil, &sdk.StartError{Reason: sdk.StartOther, Detail: err.Error()}
	}
	return buildSpec(cfg, pc, stateDir, mounts, procs)
}

// Release implements taskexec.Flavor: it removes the shared binds the
// task's start created that no other task of this driver still uses (those
// its exit left, see Exited), and starts the removal of its cgroup, which
// goes on in the background (cgroupReleases): the task's processes are
// gone.
func (f *flavor) Release(cfg *driverpb.TaskConfig) error {
	f.d.releaseCgroup(cfg.GetId())
	if err := f.releaseShared(cfg); err != nil {
		return fmt.Errorf("release task %q: %w", cfg.GetId(), err)
	}
	return nil
}

// releaseShared removes the shared binds cfg's start created that no other
// task of this driver uses, and records those left (in use, or busy) for a
// later call: each is unmounted once at most, so a later call never takes
// away a mount someone else made at the same path.
func (f *flavor) releaseShared(cfg *driverpb.TaskConfig) error {
	d := f.d
	stateDir := d.StateDir(cfg)
	created, err := readShared(stateDir)
	if err != nil || len(created) == 0 {
		return err
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	inUse := map[string]bool{}
	for _, other := range d.Tasks() {
		if other.GetId() != cfg.GetId() {
			for p := range propagatingSources(other) {
				inUse[p] = true
			}
		}
	}
	var errs []error
	var left []string
	for _, dir := range created {
		if inUse[dir] {
			left = append(left, dir)
			continue
		}
		released, err := executor.ReleaseShared(dir)
		if err != nil {
			errs = append(errs, err)
		}
		if !released {
			left = append(left, dir)
		}
	}
	if len(left) < len(created) {
		if err := rewriteShared(stateDir, left); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Exited implements taskexec.Flavor: an exit after the kernel's OOM killer
// acted in the task's cgroup is an OOM kill. Once that is read the
// cgroup's removal starts (in the background) and the shared binds the
// task's start created are removed: the task's processes are gone (its
// PID namespace ended with its init), and the client unpublishes the
// task's volumes on its exit, before DestroyTask, so a host volume's
// self-bind must not outlive the exit (its delete would find it busy).
func (f *flavor) Exited(cfg *driverpb.TaskConfig, res *driverpb.ExitResult) {
	defer f.d.releaseCgroup(cfg.GetId())
	defer func() {
		if err := f.releaseShared(cfg); err != nil {
			f.d.logger.Warn("removing the task's shared binds at its exit; its destroy tries again", "task_id", cfg.GetId(), "error", err)
		}
	}()
	kills, err := f.d.cgroups.oomKills(cfg.GetId())
	if errors.Is(err, errNoCgroup) && f.d.cgroups != nil {
		// Only the start-up sweep removes a task's cgroup before its exit
		// is read, and only one that counts no OOM kill.
		return
	}
	if err != nil {
		f.d.logger.Warn("cannot tell whether the task was OOM killed", "task_id", cfg.GetId(), "error", err)
		return
	}
	res.OomKilled = kills > 0
}
