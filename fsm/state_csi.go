package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// CSIPluginByID returns the plugin's row of the servers' plugin table, or
// nil.
func (r reader) CSIPluginByID(ws memdb.WatchSet, id string) (*pb.CSIPlugin, error) {
	return csiPluginsTable.first(r, ws, id)
}

// CSIPluginsPage returns one page of plugins sorted by ID (see JobsPage).
func (r reader) CSIPluginsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.CSIPlugin) bool) (plugins []*pb.CSIPlugin, next string, err error) {
	return pageByID(r, csiPluginsTable, ws, from, limit, keep)
}
