//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// groupController serves the CSI group controller service: snapshots of
// several volumes taken together.
//
// A group snapshot must be write-order consistent across its volumes. This
// plugin cannot pause writers, so it only cuts a group when none of the
// volumes can be written: not attached to any node (ControllerPublishVolume)
// and not staged on any node sharing the state directory. Volumes in use are
// refused with FailedPrecondition rather than copied inconsistently.
type groupController struct {
	csi.UnimplementedGroupControllerServer
	c *controller
}

var _ csi.GroupControllerServer = (*groupController)(nil)

func (g *groupController) GroupControllerGetCapabilities(context.Context, *csi.GroupControllerGetCapabilitiesRequest) (*csi.GroupControllerGetCapabilitiesResponse, error) {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT,
		}},
	}}}, nil
}

func (g *groupController) groupProto(gr *groupRecord) *csi.VolumeGroupSnapshot {
	c := g.c
	out := &csi.VolumeGroupSnapshot{
		GroupSnapshotId: gr.ID,
		CreationTime:    timestamppb.New(gr.CreatedAt),
		ReadyToUse:      true,
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, id := range gr.SnapshotIDs {
		if s := c.snapshots[id]; s != nil {
			out.Snapshots = append(out.Snapshots, c.snapshotProto(s))
		}
	}
	return out
}

// CreateVolumeGroupSnapshot snapshots every source volume into one group.
func (g *groupController) CreateVolumeGroupSnapshot(ctx context.Context, req *csi.CreateVolumeGroupSnapshotRequest) (*csi.CreateVolumeGroupSnapshotResponse, error) {
	c := g.c
	name := req.GetName()
	if err := validateName("name", name); err != nil {
		return nil, err
	}
	sources := req.GetSourceVolumeIds()
	if len(sources) == 0 {
		return nil, errInvalid("group snapshot %q: source_volume_ids is missing", name)
	}
	if sorted := dedupSorted(sources); len(sorted) != len(sources) {
		return nil, errInvalid("group snapshot %q: source_volume_ids lists a volume twice", name)
	}
	if len(req.GetParameters()) > 0 {
		return nil, errInvalid("group snapshot %q: parameters are not supported (got %d)", name, len(req.GetParameters()))
	}
	unlock, err := c.locks.lock(ctx, "group-name/"+name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c.mu.RLock()
	existing := c.groups[c.groupByName[name]]
	c.mu.RUnlock()
	if existing != nil {
		if !slices.Equal(dedupSorted(existing.SourceVolumeIDs), dedupSorted(sources)) {
			return nil, errExists("group snapshot %q already exists as %s of volumes %s", name, existing.ID, strings.Join(existing.SourceVolumeIDs, ", "))
		}
		return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: g.groupProto(existing)}, nil
	}

	keys := make([]string, len(sources))
	for i, id := range sources {
		if !validID(volumePrefix, id) {
			return nil, errNotFound("group snapshot %q: source volume %s does not exist", name, id)
		}
		keys[i] = "volume/" + id
	}
	unlockVols, err := c.locks.lockAll(ctx, keys)
	if err != nil {
		return nil, err
	}
	defer unlockVols()
	vols := make([]*volumeRecord, len(sources))
	for i, id := range sources {
		if vols[i] = c.volume(id); vols[i] == nil {
			return nil, errNotFound("group snapshot %q: source volume %s does not exist", name, id)
		}
		if err := g.checkQuiet(vols[i]); err != nil {
			return nil, errPrecondition("group snapshot %q: %v", name, err)
		}
	}

	gr := &groupRecord{
		Version: recordVersion, ID: newID(groupPrefix, c.now()), Name: name,
		SourceVolumeIDs: append([]string(nil), sources...), CreatedAt: c.now().UTC(),
	}
	tmp := filepath.Join(c.lay.groupsDir(), tmpPrefix+gr.ID)
	// The whole group is reserved before anything is copied: a group that
	// cannot fit is refused at once, and each member's copy, once
	// written, leaves the reservation's disk part (statfs counts it).
	used := make([]int64, len(vols))
	var total int64
	for i, v := range vols {
		if used[i], err = c.measure(ctx, v, fmt.Sprintf("group snapshot %q", name)); err != nil {
			return nil, err
		}
		total += used[i]
	}
	res, err := c.reserve(total, fmt.Sprintf("group snapshot %q of volumes %s", name, strings.Join(sources, ", ")))
	if err != nil {
		return nil, err
	}
	defer res.release()
	snaps, err := g.cutGroup(ctx, tmp, gr, vols, used, res)
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	final := c.lay.groupDir(gr.ID)
	if err := os.Rename(tmp, final); err != nil {
		os.RemoveAll(tmp)
		return nil, errInternal(err, "group snapshot %q", name)
	}
	if err := syncDir(c.lay.groupsDir()); err != nil {
		return nil, errInternal(err, "group snapshot %q", name)
	}
	c.mu.Lock()
	for _, s := range snaps {
		s.dir = filepath.Join(final, "snapshots", s.ID)
		c.snapshots[s.ID] = s
	}
	res.handOverLocked()
	c.groups[gr.ID] = gr
	c.groupByName[name] = gr.ID
	c.mu.Unlock()
	c.log.Info("group snapshot created", "group_snapshot", gr.ID, "name", name, "volumes", sources)
	return &csi.CreateVolumeGroupSnapshotResponse{GroupSnapshot: g.groupProto(gr)}, nil
}

// cutGroup copies each volume (vols[i] measured as used[i] bytes, held by
// res) into dir/snapshots and writes the group record last, so the group
// exists only once all its snapshots do.
func (g *groupController) cutGroup(ctx context.Context, dir string, gr *groupRecord, vols []*volumeRecord, used []int64, res *reservation) ([]*snapshotRecord, error) {
	c := g.c
	snapDir := filepath.Join(dir, "snapshots")
	if err := os.MkdirAll(snapDir, 0o700); err != nil {
		return nil, errInternal(err, "group snapshot %q", gr.Name)
	}
	var snaps []*snapshotRecord
	for i, v := range vols {
		s, err := c.cutSnapshot(ctx, snapDir, v, gr.Name+"/"+v.ID, gr.ID, used[i], res)
		if err != nil {
			return nil, err
		}
		snaps = append(snaps, s)
		gr.SnapshotIDs = append(gr.SnapshotIDs, s.ID)
	}
	if err := writeRecord(filepath.Join(dir, "group.json"), gr); err != nil {
		return nil, errInternal(err, "group snapshot %q", gr.Name)
	}
	if err := syncDir(dir); err != nil {
		return nil, errInternal(err, "group snapshot %q", gr.Name)
	}
	return snaps, nil
}

// checkQuiet verifies nothing can be writing to v: no attachment, and no
// node of this state directory has it staged.
func (g *groupController) checkQuiet(v *volumeRecord) error {
	if len(v.Attachments) > 0 {
		return errPrecondition("volume %s is published to node(s) %s; group snapshots need every volume unpublished so the copies are write-order consistent",
			v.ID, strings.Join(v.publishedNodes(), ", "))
	}
	nodes, err := g.c.lay.loadNodes()
	if err != nil {
		return errInternal(err, "read node registrations")
	}
	for _, n := range nodes {
		if _, err := os.Stat(g.c.lay.nodeVolumeFile(n.NodeID, v.ID)); err == nil {
			return errPrecondition("volume %s is staged on node %q; group snapshots need every volume unstaged so the copies are write-order consistent", v.ID, n.NodeID)
		}
	}
	return nil
}

func (g *groupController) checkMembers(gr *groupRecord, ids []string) error {
	if len(ids) > 0 && !slices.Equal(dedupSorted(ids), dedupSorted(gr.SnapshotIDs)) {
		return errInvalid("group snapshot %s holds snapshots %s, not the snapshot_ids given", gr.ID, strings.Join(gr.SnapshotIDs, ", "))
	}
	return nil
}

// DeleteVolumeGroupSnapshot deletes a group snapshot with all its snapshots.
func (g *groupController) DeleteVolumeGroupSnapshot(ctx context.Context, req *csi.DeleteVolumeGroupSnapshotRequest) (*csi.DeleteVolumeGroupSnapshotResponse, error) {
	c := g.c
	id := req.GetGroupSnapshotId()
	if id == "" {
		return nil, errInvalid("group_snapshot_id is missing")
	}
	if !validID(groupPrefix, id) {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	unlock, err := c.locks.lock(ctx, "group/"+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c.mu.RLock()
	gr := c.groups[id]
	c.mu.RUnlock()
	if gr == nil {
		return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
	}
	if err := g.checkMembers(gr, req.GetSnapshotIds()); err != nil {
		return nil, err
	}
	keys := make([]string, len(gr.SnapshotIDs))
	for i, s := range gr.SnapshotIDs {
		keys[i] = "snapshot/" + s
	}
	unlockSnaps, err := c.locks.lockAll(ctx, keys)
	if err != nil {
		return nil, err
	}
	defer unlockSnaps()
	if err := c.lay.moveToTrash(c.lay.groupDir(id)); err != nil {
		return nil, errInternal(err, "delete group snapshot %s", id)
	}
	c.mu.Lock()
	for _, s := range gr.SnapshotIDs {
		delete(c.snapshots, s)
	}
	delete(c.groups, id)
	if c.groupByName[gr.Name] == id {
		delete(c.groupByName, gr.Name)
	}
	c.mu.Unlock()
	c.log.Info("group snapshot deleted", "group_snapshot", id, "name", gr.Name)
	return &csi.DeleteVolumeGroupSnapshotResponse{}, nil
}

// GetVolumeGroupSnapshot reports one group snapshot.
func (g *groupController) GetVolumeGroupSnapshot(ctx context.Context, req *csi.GetVolumeGroupSnapshotRequest) (*csi.GetVolumeGroupSnapshotResponse, error) {
	c := g.c
	id := req.GetGroupSnapshotId()
	if id == "" {
		return nil, errInvalid("group_snapshot_id is missing")
	}
	c.mu.RLock()
	gr := c.groups[id]
	c.mu.RUnlock()
	if gr == nil {
		return nil, errNotFound("group snapshot %s does not exist", id)
	}
	if err := g.checkMembers(gr, req.GetSnapshotIds()); err != nil {
		return nil, err
	}
	return &csi.GetVolumeGroupSnapshotResponse{GroupSnapshot: g.groupProto(gr)}, nil
}
