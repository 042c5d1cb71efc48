//go:build linux

package adapters

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/sdk"
)

// capacity is the configured capacity in bytes: a number, or a size
// string as hostpath.ParseCapacity reads it ("10GiB"); absent is 0.
func (c hostpathConfig) capacity() (int64, error) {
	if len(c.Capacity) == 0 {
		return 0, nil
	}
	var n int64
	if err := json.Unmarshal(c.Capacity, &n); err == nil {
		if n < 0 {
			return 0, errors.New("must not be negative")
		}
		return n, nil
	}
	var s string
	if err := json.Unmarshal(c.Capacity, &s); err != nil {
		return 0, fmt.Errorf("want a number of bytes or a size such as \"10GiB\", got %s", c.Capacity)
	}
	return hostpath.ParseCapacity(s)
}

// hostpathServicesConfig turns the adapter's environment into the
// hostpath plugin's config.
func hostpathServicesConfig(env sdk.StorageEnv) (hostpath.Config, error) {
	c, err := parseHostpathConfig(env.Config)
	if err != nil {
		return hostpath.Config{}, err
	}
	capacity, _ := c.capacity() // checked by parseHostpathConfig
	stateDir := c.StateDir
	if stateDir == "" {
		if env.DataDir == "" {
			return hostpath.Config{}, errors.New("hostpath adapter config: no state_dir, and berth gave the adapter no data dir")
		}
		stateDir = filepath.Join(env.DataDir, "state")
	}
	nodeID := env.NodeID
	if nodeID == "" {
		nodeID = env.NodeName
	}
	return hostpath.Config{
		NodeID:     nodeID,
		StateDir:   stateDir,
		Capacity:   capacity,
		Mode:       c.Mode,
		MaxVolumes: c.MaxVolumes,
		Topology:   c.Topology,
		Logger:     sdk.NewPluginLogger(HostpathName),
	}, nil
}

func serveHostpath() error {
	env, err := sdk.StorageAdapterEnv()
	if err != nil {
		return err
	}
	cfg, err := hostpathServicesConfig(env)
	if err != nil {
		return err
	}
	svc, err := hostpath.NewServices(cfg)
	if err != nil {
		return err
	}
	defer svc.Close()
	cfg.Logger.Info("serving as a storage adapter", svc.Describe()...)
	return sdk.ServeStorageAdapter(sdk.StorageAdapter{
		Name:          HostpathName,
		Identity:      svc.Identity(),
		Controller:    svc.Controller(),
		Node:          svc.Node(),
		Register:      svc.RegisterExtra,
		ServerOptions: svc.ServerOptions(),
	})
}
