package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// TableHostVolumes holds dynamic host volumes (pb.HostVolume) by ID:
// written only by HostVolumeRegister and HostVolumeDelete (gated by
// hostVolumesSince in host/server/endpoints).
const TableHostVolumes = "host_volumes"

var (
	hostVolumesTable = newTable(TableHostVolumes, (*pb.HostVolume).GetId)
	// hostVolumesByNode finds a node's volumes, and by name the one a
	// group volume names there.
	hostVolumesByNode = hostVolumesTable.index("node", (*pb.HostVolume).GetNodeId, (*pb.HostVolume).GetName, (*pb.HostVolume).GetId)
)

// HostVolumeByID returns the dynamic host volume, or nil.
func (r reader) HostVolumeByID(ws memdb.WatchSet, id string) (*pb.HostVolume, error) {
	return hostVolumesTable.first(r, ws, id)
}

// HostVolumesByNode returns the node's dynamic host volumes by name.
func (r reader) HostVolumesByNode(ws memdb.WatchSet, nodeID string) ([]*pb.HostVolume, error) {
	return hostVolumesByNode.list(r, ws, nodeID)
}

// HostVolumesPage returns one page of dynamic host volumes sorted by ID.
func (r reader) HostVolumesPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.HostVolume) bool) ([]*pb.HostVolume, string, error) {
	return pageByID(r, hostVolumesTable, ws, from, limit, keep)
}
