//go:build linux

package adapters

import (
	"errors"
	"path/filepath"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/sdk"
)

// hostpathServicesConfig turns the adapter's environment into the
// hostpath plugin's config.
func hostpathServicesConfig(env sdk.StorageEnv) (hostpath.Config, error) {
	c, err := parseHostpathConfig(env.Config)
	if err != nil {
		return hostpath.Config{}, err
	}
	capacity, _ := c.capacity()           // checked by parseHostpathConfig
	maxVolumeSize, _ := c.maxVolumeSize() // likewise
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

		MaxVolumeSize: maxVolumeSize,
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
