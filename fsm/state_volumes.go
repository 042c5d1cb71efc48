package fsm

import (
	"strconv"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// VolumeByID returns the volume, or nil.
func (r reader) VolumeByID(ws memdb.WatchSet, id string) (*pb.Volume, error) {
	return volumesTable.first(r, ws, id)
}

// VolumesPage returns one page of volumes sorted by ID (see JobsPage).
func (r reader) VolumesPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Volume) bool) (vols []*pb.Volume, next string, err error) {
	return pageByID(r, volumesTable, ws, from, limit, keep)
}

// VolumesByPlugin returns the plugin's volumes sorted by ID.
func (r reader) VolumesByPlugin(ws memdb.WatchSet, pluginID string) ([]*pb.Volume, error) {
	return volumesByPlugin.list(r, ws, pluginID)
}

// ClaimByID returns the claim, or nil (never reserved, or freed).
func (r reader) ClaimByID(ws memdb.WatchSet, id string) (*pb.Claim, error) {
	return claimsTable.first(r, ws, id)
}

// ClaimsByVolume returns the volume's claims sorted by claim ID.
func (r reader) ClaimsByVolume(ws memdb.WatchSet, volumeID string) ([]*pb.Claim, error) {
	return claimsByVolume.list(r, ws, volumeID)
}

// ClaimsByNode returns the claims held on the node, by volume then claim
// ID.
func (r reader) ClaimsByNode(ws memdb.WatchSet, nodeID string) ([]*pb.Claim, error) {
	return claimsByNode.list(r, ws, nodeID)
}

// ClaimsByAlloc returns the alloc's claims, by volume.
func (r reader) ClaimsByAlloc(ws memdb.WatchSet, allocID string) ([]*pb.Claim, error) {
	return claimsByAlloc.list(r, ws, allocID)
}

// ClaimsByState returns the claims in a state, by claim ID. The reaper's
// releasing and node-detached claims are read through an index; a state
// before releasing, which nothing on a hot path lists, scans the table
// (and watches all of it).
func (r reader) ClaimsByState(ws memdb.WatchSet, state pb.ClaimState) ([]*pb.Claim, error) {
	if claimIndexedState(state) {
		return claimsByState.list(r, ws, strconv.Itoa(int(state)))
	}
	claims, _, err := r.ClaimsPage(ws, "", 0, func(c *pb.Claim) bool { return c.GetState() == state })
	return claims, err
}

// ClaimsPage returns one page of claims sorted by ID (see JobsPage).
func (r reader) ClaimsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Claim) bool) (claims []*pb.Claim, next string, err error) {
	return pageByID(r, claimsTable, ws, from, limit, keep)
}

// Attachment returns the volume's attachment to the node, or nil.
func (r reader) Attachment(ws memdb.WatchSet, volumeID, nodeID string) (*pb.Attachment, error) {
	return attachmentsTable.first(r, ws, volumeID, nodeID)
}

// AttachmentsByVolume returns the volume's attachments by node ID.
func (r reader) AttachmentsByVolume(ws memdb.WatchSet, volumeID string) ([]*pb.Attachment, error) {
	return attachmentsTable.list(r, ws, volumeID)
}

// AttachmentsByNode returns the node's attachments by volume ID.
func (r reader) AttachmentsByNode(ws memdb.WatchSet, nodeID string) ([]*pb.Attachment, error) {
	return attachmentsByNode.list(r, ws, nodeID)
}

// AttachmentsByState returns the attachments in a state (the attach
// reconciler's attaching and detaching ones), by volume and node.
func (r reader) AttachmentsByState(ws memdb.WatchSet, state pb.AttachmentState) ([]*pb.Attachment, error) {
	return attachmentsByState.list(r, ws, strconv.Itoa(int(state)))
}
