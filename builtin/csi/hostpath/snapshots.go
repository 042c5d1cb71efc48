//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Snapshots are full copies (sparse for block images), cut while holding the
// source volume's lock, so they are independent of the volume: deleting the
// volume keeps them, and they are ready to use as soon as CreateSnapshot
// returns. The space a copy takes counts against the plugin's capacity.
//
// Snapshots report no accessible topology and the plugin does not claim
// SNAPSHOT_ACCESSIBILITY_CONSTRAINTS: a snapshot lives in the controller's
// pool and restores wherever the controller can place a volume, so it is
// equally usable everywhere this controller reaches; where the restored
// volume lands is decided, and reported, by CreateVolume.

func (c *controller) snapshotProto(s *snapshotRecord) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:      s.ID,
		SourceVolumeId:  s.SourceVolumeID,
		SizeBytes:       s.SizeBytes,
		CreationTime:    timestamppb.New(s.CreatedAt),
		ReadyToUse:      true,
		GroupSnapshotId: s.GroupID,
	}
}

// checkSnapshotTopology verifies that a snapshot of a volume placed in
// volume can satisfy the request's accessibility requirements: the volume
// must lie in one of the allowed topologies.
func checkSnapshotTopology(req *csi.TopologyRequirement, volume []map[string]string) error {
	if satisfies(volume, req) {
		return nil
	}
	return fmt.Errorf("the source volume lies in %s, outside every requested topology", formatTopology(volume[0]))
}

// CreateSnapshot copies a volume's content into a new snapshot. A repeated
// call with the same name and source returns the first snapshot.
func (c *controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	name, src := req.GetName(), req.GetSourceVolumeId()
	if err := validateName("name", name); err != nil {
		return nil, err
	}
	if src == "" {
		return nil, errInvalid("snapshot %q: source_volume_id is missing", name)
	}
	if len(req.GetParameters()) > 0 {
		return nil, errInvalid("snapshot %q: parameters are not supported (got %d)", name, len(req.GetParameters()))
	}
	unlock, err := c.locks.lock(ctx, "snapshot-name/"+name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c.mu.RLock()
	existing := c.snapshots[c.snapByName[name]]
	c.mu.RUnlock()
	if existing != nil {
		if existing.SourceVolumeID != src {
			return nil, errExists("snapshot %q already exists as %s of volume %s, not of volume %s", name, existing.ID, existing.SourceVolumeID, src)
		}
		return &csi.CreateSnapshotResponse{Snapshot: c.snapshotProto(existing)}, nil
	}
	if !validID(volumePrefix, src) {
		return nil, errNotFound("snapshot %q: source volume %s does not exist", name, src)
	}
	unlockVol, err := c.locks.lock(ctx, "volume/"+src)
	if err != nil {
		return nil, err
	}
	defer unlockVol()
	v := c.volume(src)
	if v == nil {
		return nil, errNotFound("snapshot %q: source volume %s does not exist", name, src)
	}
	if err := checkSnapshotTopology(req.GetAccessibilityRequirements(), v.Topology); err != nil {
		return nil, errExhausted("snapshot %q: %v", name, err)
	}
	used, err := c.measure(ctx, v, fmt.Sprintf("snapshot %q", name))
	if err != nil {
		return nil, err
	}
	res, err := c.reserve(used, fmt.Sprintf("snapshot %q of volume %s", name, v.ID))
	if err != nil {
		return nil, err
	}
	defer res.release()
	s, err := c.cutSnapshot(ctx, c.lay.snapshotsDir(), v, name, "", used, res)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.snapshots[s.ID] = s
	c.snapByName[name] = s.ID
	res.handOverLocked()
	c.mu.Unlock()
	c.log.Info("snapshot created", "snapshot", s.ID, "name", name, "volume", src, "bytes", s.UsedBytes)
	return &csi.CreateSnapshotResponse{Snapshot: c.snapshotProto(s)}, nil
}

// measure is the space volume v's content takes, which a snapshot of it
// takes too. what names the snapshot, for the error text.
func (c *controller) measure(ctx context.Context, v *volumeRecord, what string) (int64, error) {
	u, err := diskUsage(ctx, dataPath(c.lay.volumeDir(v.ID), v.Kind))
	if err != nil {
		return 0, errInternal(err, "%s: measure volume %s", what, v.ID)
	}
	return u.bytes, nil
}

// cutSnapshot copies volume v, measured as used bytes, into parent/<new
// id>, under a temporary name renamed into place when complete, and tells
// res (which holds at least used bytes) that the copy is written. The
// caller holds v's lock, and hands res over when it puts the snapshot in
// c.snapshots (which then accounts for its space), or releases it.
func (c *controller) cutSnapshot(ctx context.Context, parent string, v *volumeRecord, name, groupID string, used int64, res *reservation) (*snapshotRecord, error) {
	src := dataPath(c.lay.volumeDir(v.ID), v.Kind)
	s := &snapshotRecord{
		Version: recordVersion, ID: newID(snapshotPrefix, c.now()), Name: name,
		SourceVolumeID: v.ID, GroupID: groupID, Kind: v.Kind,
		SizeBytes: v.CapacityBytes, UsedBytes: used, CreatedAt: c.now().UTC(),
	}
	tmp := filepath.Join(parent, tmpPrefix+s.ID)
	if err := c.writeSnapshot(ctx, tmp, src, s); err != nil {
		os.RemoveAll(tmp)
		return nil, errInternal(err, "snapshot %q of volume %s", name, v.ID)
	}
	res.written(used)
	s.dir = filepath.Join(parent, s.ID)
	if err := os.Rename(tmp, s.dir); err != nil {
		os.RemoveAll(tmp)
		return nil, errInternal(err, "snapshot %q of volume %s", name, v.ID)
	}
	if err := syncDir(parent); err != nil {
		return nil, errInternal(err, "snapshot %q of volume %s", name, v.ID)
	}
	return s, nil
}

func (c *controller) writeSnapshot(ctx context.Context, dir, src string, s *snapshotRecord) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	dst := dataPath(dir, s.Kind)
	var err error
	if s.Kind == kindBlock {
		err = copyFile(ctx, src, dst, 0o600)
	} else {
		err = copyTree(ctx, src, dst)
	}
	if err != nil {
		return err
	}
	if err := writeRecord(filepath.Join(dir, "snapshot.json"), s); err != nil {
		return err
	}
	return syncDir(dir)
}

// DeleteSnapshot removes a snapshot; one that belongs to a group snapshot
// is deleted with its group.
func (c *controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, errInvalid("snapshot_id is missing")
	}
	if !validID(snapshotPrefix, id) {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	unlock, err := c.locks.lock(ctx, "snapshot/"+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := c.snapshot(id)
	if s == nil {
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if s.GroupID != "" {
		return nil, errInvalid("snapshot %s is part of group snapshot %s; delete it with DeleteVolumeGroupSnapshot", id, s.GroupID)
	}
	if err := c.lay.moveToTrash(s.dir); err != nil {
		return nil, errInternal(err, "delete snapshot %s", id)
	}
	c.mu.Lock()
	delete(c.snapshots, id)
	if c.snapByName[s.Name] == id {
		delete(c.snapByName, s.Name)
	}
	c.mu.Unlock()
	c.log.Info("snapshot deleted", "snapshot", id, "name", s.Name)
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots pages through snapshots, oldest first, optionally only one
// snapshot ID or the snapshots of one source volume.
func (c *controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var ids []string
	for id, s := range c.snapshots {
		if req.GetSnapshotId() != "" && id != req.GetSnapshotId() {
			continue
		}
		if req.GetSourceVolumeId() != "" && s.SourceVolumeID != req.GetSourceVolumeId() {
			continue
		}
		ids = append(ids, id)
	}
	page, next, err := paginate(ids, snapshotPrefix, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, id := range page {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: c.snapshotProto(c.snapshots[id])})
	}
	return resp, nil
}

// GetSnapshot reports one snapshot.
func (c *controller) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	id := req.GetSnapshotId()
	if id == "" {
		return nil, errInvalid("snapshot_id is missing")
	}
	s := c.snapshot(id)
	if s == nil {
		return nil, errNotFound("snapshot %s does not exist", id)
	}
	return &csi.GetSnapshotResponse{Snapshot: c.snapshotProto(s)}, nil
}
