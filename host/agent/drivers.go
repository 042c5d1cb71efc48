package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"berth.dev/berth/builtin/drivers"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/pluginsup"
	"berth.dev/berth/taskdrivers"
)

var _ taskdrivers.Store = (*state.DB)(nil)

// driverStartWait bounds how long agent start waits for the driver plugins'
// first fingerprints; slower plugins report later, through re-registration.
const driverStartWait = 60 * time.Second

// driverStopWait bounds how long a shutting-down dev agent waits for its
// tasks to stop.
const driverStopWait = 30 * time.Second

// startDrivers opens the client state DB and starts the task driver
// manager: the built-in drivers (mock only in dev mode or when configured),
// the executables in the plugin dir, each with its plugin block's config.
// An invalid plugin config stops the agent from starting; a plugin that is
// missing, broken or crashing does not: its driver is reported unhealthy
// and retried.
func (a *Agent) startDrivers() error {
	var opts []state.Option
	if a.ownsDataDir {
		// A dev agent's data dir is temporary: no restart reads it.
		opts = append(opts, state.WithoutSync())
	}
	db, err := state.Open(state.Path(a.dataDir), opts...)
	if err != nil {
		return err
	}
	a.state = db
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the berth binary to run built-in drivers: %w", err)
	}
	configs, err := a.pluginConfigs()
	if err != nil {
		return err
	}
	pluginDir := a.cfg.PluginDir
	if pluginDir == "" && a.cfg.DevMode {
		pluginDir = devPluginDir(exe)
	}
	if pluginDir == "" {
		pluginDir = filepath.Join(a.dataDir, "plugins")
	}
	plugins, err := taskdrivers.Catalog(taskdrivers.CatalogConfig{
		Executable: exe,
		Builtins:   drivers.Plugins(),
		Dev:        a.cfg.DevMode,
		PluginDir:  pluginDir,
		Plugins:    configs,
	})
	if err != nil {
		a.logger.Warn("third-party driver plugins not loaded", "error", err)
	}
	m, err := taskdrivers.New(taskdrivers.Config{
		Plugins: plugins,
		Store:   db,
		Options: pluginsup.Options{Logger: a.logger.Named("drivers")},
		// A dev agent deletes its data dir, and with it the task handles
		// that would let the next start recover its tasks: stop them.
		StopTasksOnShutdown: a.ownsDataDir,
	})
	if err != nil {
		return err
	}
	a.drivers = m
	ctx, cancel := context.WithTimeout(context.Background(), driverStartWait)
	defer cancel()
	err = m.Start(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		a.logger.Warn("some driver plugins are still starting", "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("task driver plugins: %w", err)
	}
	return nil
}

// pluginConfigs turns the driver plugin blocks (all but type "csi") into
// the manager's JSON configs.
func (a *Agent) pluginConfigs() ([]taskdrivers.PluginConfig, error) {
	var out []taskdrivers.PluginConfig
	err := a.eachPlugin(false, func(p *PluginConfig, js []byte) {
		out = append(out, taskdrivers.PluginConfig{Name: p.Name, JSON: js, Source: p.Source})
	})
	return out, err
}

// eachPlugin calls fn with each plugin block of the kind asked for (csi:
// storage adapters, else drivers), sorted by name, and its config as JSON.
func (a *Agent) eachPlugin(csi bool, fn func(p *PluginConfig, js []byte)) error {
	names := make([]string, 0, len(a.cfg.Plugins))
	for name := range a.cfg.Plugins {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := a.cfg.Plugins[name]
		if p.IsCSI() != csi {
			continue
		}
		js, err := json.Marshal(p.Config)
		if err != nil {
			return fmt.Errorf("plugin %q (%s): config: %w", name, p.Source, err)
		}
		fn(p, js)
	}
	return nil
}

// stopDrivers stops the driver plugins (and, in dev mode, their tasks)
// and closes the state DB.
func (a *Agent) stopDrivers() {
	if a.drivers != nil {
		ctx, cancel := context.WithTimeout(context.Background(), driverStopWait)
		if err := a.drivers.Shutdown(ctx); err != nil {
			a.logger.Warn("stopping task drivers", "error", err)
		}
		cancel()
	}
	if a.state != nil {
		if err := a.state.Close(); err != nil {
			a.logger.Warn("closing the client state db", "error", err)
		}
	}
}
