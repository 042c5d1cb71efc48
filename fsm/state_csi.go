package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// CSIPluginByID returns the plugin's row of the servers' plugin table with
// its instances (controllers and nodes by node ID, from
// csi_plugin_instances for a split row), or nil.
func (r reader) CSIPluginByID(ws memdb.WatchSet, id string) (*pb.CSIPlugin, error) {
	p, err := csiPluginsTable.first(r, ws, id)
	if err != nil || p == nil {
		return p, err
	}
	return withInstances(r, ws, p)
}

// CSIPluginFacts returns the plugin's row without reading its instances
// and allocations: its derived facts and counts are those of
// CSIPluginByID; its controllers, nodes and allocations are empty or
// full by the row's form, so a caller must not rely on them. For readers of the facts alone,
// which it costs one lookup however many nodes run the plugin.
func (r reader) CSIPluginFacts(ws memdb.WatchSet, id string) (*pb.CSIPlugin, error) {
	return csiPluginsTable.first(r, ws, id)
}

// CSIPluginInstance returns the node's instance of the plugin, its
// controller or node side, or nil: one lookup.
func (r reader) CSIPluginInstance(ws memdb.WatchSet, pluginID, nodeID string, controller bool) (*pb.CSIPluginInfo, error) {
	p, err := csiPluginsTable.first(r, ws, pluginID)
	if err != nil || p == nil {
		return nil, err
	}
	if inline(p) {
		if controller {
			return p.GetControllers()[nodeID], nil
		}
		return p.GetNodes()[nodeID], nil
	}
	i, err := csiInstancesTable.first(r, ws, pluginID, sideOf(controller), nodeID)
	return i.GetInfo(), err
}

// CSIPluginsPage returns one page of plugins sorted by ID (see JobsPage)
// as stored: their facts, as CSIPluginFacts answers them, which may omit
// the instances and allocations (a split row's are left to
// CSIPluginByID; an inline row's are there).
func (r reader) CSIPluginsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.CSIPlugin) bool) (plugins []*pb.CSIPlugin, next string, err error) {
	return pageByID(r, csiPluginsTable, ws, from, limit, keep)
}

// CSIPluginControllers returns the plugin's controller instances by node
// ID (nil when it has none or no row), without reading its node
// instances: a plugin's controllers are few, its node instances one a
// node.
func (r reader) CSIPluginControllers(ws memdb.WatchSet, id string) (map[string]*pb.CSIPluginInfo, error) {
	p, err := csiPluginsTable.first(r, ws, id)
	if err != nil || p == nil {
		return nil, err
	}
	if inline(p) {
		return p.GetControllers(), nil
	}
	insts, err := csiInstancesTable.list(r, ws, id, sideController)
	if err != nil || len(insts) == 0 {
		return nil, err
	}
	out := make(map[string]*pb.CSIPluginInfo, len(insts))
	for _, i := range insts {
		out[i.GetNodeId()] = i.GetInfo()
	}
	return out, nil
}
