package pluginmanager

import (
	"fmt"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/pb"
)

// controllerRef is the instance the node's set names as a plugin's
// controller: its worker (whose connection the calls use) and what the set
// says of it.
type controllerRef struct {
	w    *worker
	info *pb.CSIPluginInfo
}

// Controller returns a client of the plugin's controller instance on this
// node: the one the node reports to the servers (the newest healthy task
// plugin, else a storage adapter). It fails with ErrNoController when the
// node reports no controller of the plugin, and with
// ErrControllerUnhealthy (saying why) when it reports one that is not
// healthy or whose connection is not made yet. The client stays owned by
// the manager: callers must not close it, and a call on it fails
// (Canceled or Unavailable) if the instance goes away meanwhile.
func (m *Manager) Controller(pluginID string) (*csi.Client, error) {
	return m.ControllerOf(pluginID, nil)
}

// ControllerOf is Controller for a call addressed to one instance of the
// plugin ID (CSIControllerCallRequest.expect): when the instance the node
// reports is another one it fails with csi.ErrControllerInstanceChanged,
// naming both, so a call the servers meant for one backend never reaches
// another. A nil expect takes whichever instance serves.
func (m *Manager) ControllerOf(pluginID string, expect *pb.CSIControllerInstance) (*csi.Client, error) {
	m.mu.Lock()
	ref, ok := m.controllers[pluginID]
	m.mu.Unlock()
	if !ok || ref.w == nil {
		return nil, fmt.Errorf("csi plugin %q: %w", pluginID, ErrNoController)
	}
	if err := csi.CheckInstance(expect, ref.info); err != nil {
		return nil, fmt.Errorf("csi plugin %q: %w", pluginID, err)
	}
	if !ref.info.GetHealthy() {
		why := ref.info.GetHealthDescription()
		if why == "" {
			why = "unhealthy"
		}
		return nil, fmt.Errorf("csi plugin %q: %w: %s", pluginID, ErrControllerUnhealthy, why)
	}
	c := ref.w.client.Load()
	if c == nil {
		return nil, fmt.Errorf("csi plugin %q: %w: not connected yet", pluginID, ErrControllerUnhealthy)
	}
	return c, nil
}
