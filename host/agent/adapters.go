package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	builtinadapters "berth.dev/berth/builtin/csi/adapters"
	"berth.dev/berth/csi/adapters"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/internal/pluginsup"
)

var _ adapters.Store = (*state.DB)(nil)

// adapterStartWait bounds how long agent start waits for the storage
// adapters' first probes; slower ones report later through their events
// (the plugin manager does not hold the node's first plugin set for an
// adapter that is not running). It stays well under the servers' default
// heartbeat TTL, so a restart with one hung adapter does not get the node
// marked down before the client heartbeats again.
const adapterStartWait = 5 * time.Second

// startAdapters starts the CSI storage adapters: the built-in hostpath
// adapter in dev mode or when a `type = "csi"` plugin block names it, the
// executables in <plugin_dir>/csi, each with its plugin block's config. It
// runs before the client is created, so that the client's plugin manager
// has them from its start; adapters are told the node's ID, which
// client.LoadNodeID gives ahead of the client. An invalid adapter config stops the agent from starting; a missing
// or crashing adapter does not: it is reported unhealthy and retried.
func (a *Agent) startAdapters(nodeID, nodeName string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the berth binary to run built-in storage adapters: %w", err)
	}
	var configs []adapters.PluginConfig
	if err := a.eachPlugin(true, func(p *PluginConfig, js []byte) {
		configs = append(configs, adapters.PluginConfig{Name: p.Name, JSON: js, Source: p.Source})
	}); err != nil {
		return err
	}
	pluginDir := a.cfg.PluginDir
	if pluginDir == "" {
		pluginDir = filepath.Join(a.dataDir, "plugins")
	}
	catalog, err := adapters.Catalog(adapters.CatalogConfig{
		Executable: exe,
		Builtins:   builtinadapters.Plugins(),
		Dev:        a.cfg.DevMode,
		PluginDir:  pluginDir,
		Plugins:    configs,
	})
	if err != nil {
		a.logger.Warn("third-party storage adapters not loaded", "error", err)
	}
	if len(catalog) == 0 {
		return nil
	}
	m, err := adapters.New(adapters.Config{
		Adapters: catalog,
		Store:    a.state,
		Options:  pluginsup.Options{Logger: a.logger.Named("csi-adapters")},
		NodeID:   nodeID,
		NodeName: nodeName,
		DataDir:  a.dataDir,
	})
	if err != nil {
		return err
	}
	a.adapters = m
	ctx, cancel := context.WithTimeout(context.Background(), adapterStartWait)
	defer cancel()
	err = m.Start(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		a.logger.Warn("some storage adapters are still starting", "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage adapters: %w", err)
	}
	return nil
}

// Adapters returns the storage adapter manager of the client role, nil
// when the client is disabled or no adapter is configured.
func (a *Agent) Adapters() *adapters.Manager { return a.adapters }

// stopAdapters stops the storage adapter processes. It runs before the
// state DB, which holds their reattach records, is closed.
func (a *Agent) stopAdapters() {
	if a.adapters == nil {
		return
	}
	if err := a.adapters.Shutdown(context.Background()); err != nil {
		a.logger.Warn("stopping storage adapters", "error", err)
	}
}
