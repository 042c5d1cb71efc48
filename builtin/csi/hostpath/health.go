//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// Health reasons, CamelCase as the CSI spec asks.
const (
	reasonDataMissing         = "DataMissing"
	reasonImageTruncated      = "ImageTruncated"
	reasonCapacityExceeded    = "CapacityExceeded"
	reasonVolumeDeleted       = "VolumeDeleted"
	reasonStagingMountMissing = "StagingMountMissing"
	reasonLoopDeviceDetached  = "LoopDeviceDetached"
	reasonNotStagedAtPath     = "NotStagedAtPath"
	reasonNotPublishedAtPath  = "NotPublishedAtPath"
	reasonPublishMountMissing = "PublishMountMissing"
)

func healthEntry(t csi.VolumeHealthErrorType, reason, format string, args ...any) *csi.VolumeHealth_VolumeHealthEntry {
	return &csi.VolumeHealth_VolumeHealthEntry{Status: t, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// dataHealth inspects a volume's content in the state directory: missing
// data, a truncated image, or a directory holding more than its capacity
// (mount volumes are accounted, not quota-limited).
func dataHealth(ctx context.Context, lay layout, v *volumeRecord) ([]*csi.VolumeHealth_VolumeHealthEntry, error) {
	data := dataPath(lay.volumeDir(v.ID), v.Kind)
	fi, err := os.Stat(data)
	if isNotExist(err) {
		return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonDataMissing,
			"volume %s has no content at %s", v.ID, data)}, nil
	}
	if err != nil {
		return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonDataMissing,
			"volume %s: %v", v.ID, err)}, nil
	}
	if v.Kind == kindBlock {
		if fi.Size() < v.CapacityBytes {
			return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_DATA_LOSS, reasonImageTruncated,
				"volume %s: image %s has %d bytes, the volume %d", v.ID, data, fi.Size(), v.CapacityBytes)}, nil
		}
		return nil, nil
	}
	u, err := diskUsage(ctx, data)
	if err != nil {
		return nil, err
	}
	if u.bytes > v.CapacityBytes {
		return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_DEGRADED, reasonCapacityExceeded,
			"volume %s holds %d bytes, more than its capacity of %d", v.ID, u.bytes, v.CapacityBytes)}, nil
	}
	return nil, nil
}

// ControllerGetVolumeHealth reports problems with a volume's content.
func (c *controller) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errInvalid("volume_id is missing")
	}
	v := c.volume(id)
	if v == nil {
		return nil, errNotFound("volume %s does not exist", id)
	}
	entries, err := dataHealth(ctx, c.lay, v)
	if err != nil {
		return nil, errInternal(err, "check health of volume %s", id)
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: id, HealthStatuses: entries}}, nil
}

// ControllerListVolumeHealth pages through the volumes that have problems.
func (c *controller) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	c.mu.RLock()
	vols := make([]*volumeRecord, 0, len(c.volumes))
	for _, v := range c.volumes {
		vols = append(vols, v)
	}
	c.mu.RUnlock()
	unhealthy := map[string][]*csi.VolumeHealth_VolumeHealthEntry{}
	var ids []string
	for _, v := range vols {
		entries, err := dataHealth(ctx, c.lay, v)
		if err != nil {
			if isNotExist(err) {
				continue // deleted meanwhile
			}
			return nil, errInternal(err, "check health of volume %s", v.ID)
		}
		if len(entries) > 0 {
			unhealthy[v.ID] = entries
			ids = append(ids, v.ID)
		}
	}
	page, next, err := paginate(ids, volumePrefix, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ControllerListVolumeHealthResponse{NextToken: next}
	for _, id := range page {
		resp.Entries = append(resp.Entries, &csi.VolumeHealth{VolumeId: id, HealthStatuses: unhealthy[id]})
	}
	return resp, nil
}

// NodeGetVolumeHealth reports problems with a volume as this node sees it:
// its content, its staging (mount or loop device) and, when asked, a publish
// target. It also answers for volumes merely known to the state directory,
// so a CO can learn why staging failed.
func (n *node) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	volID := req.GetVolumeId()
	if volID == "" {
		return nil, errInvalid("volume_id is missing")
	}
	rec, err := n.loadNodeVolume(volID)
	if err != nil {
		return nil, err
	}
	v, err := n.loadVolume(volID)
	if err != nil && (rec == nil || !isNotFound(err)) {
		return nil, err
	}
	var entries []*csi.VolumeHealth_VolumeHealthEntry
	if v == nil {
		entries = append(entries, healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonVolumeDeleted,
			"volume %s no longer exists in %s but is still staged on node %q", volID, n.lay.root, n.id))
	} else {
		de, err := dataHealth(ctx, n.lay, v)
		if err != nil {
			return nil, errInternal(err, "check health of volume %s", volID)
		}
		entries = append(entries, de...)
	}
	if rec != nil {
		entries = append(entries, n.stagingHealth(rec)...)
	}
	if p := req.GetStagingTargetPath(); p != "" && (rec == nil || filepath.Clean(p) != rec.StagingPath) {
		entries = append(entries, healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonNotStagedAtPath,
			"volume %s is not staged at %s on node %q", volID, p, n.id))
	}
	if p := req.GetVolumePublishPath(); p != "" {
		entries = append(entries, n.targetHealth(volID, rec, filepath.Clean(p))...)
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: &csi.VolumeHealth{VolumeId: volID, HealthStatuses: entries}}, nil
}

func (n *node) stagingHealth(rec *nodeVolumeRecord) []*csi.VolumeHealth_VolumeHealthEntry {
	data := dataPath(n.lay.volumeDir(rec.VolumeID), rec.Kind)
	if rec.Kind == kindBlock {
		if !loopBacks(rec.LoopDevice, data, rec.StageReadOnly, loopTag(n.id, "stage")) {
			return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonLoopDeviceDetached,
				"volume %s: loop device %s is no longer bound to its image", rec.VolumeID, rec.LoopDevice)}
		}
		return nil
	}
	if !mountedFrom(rec.StagingPath, data) {
		return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonStagingMountMissing,
			"volume %s: staging path %s no longer shows the volume", rec.VolumeID, rec.StagingPath)}
	}
	return nil
}

func (n *node) targetHealth(volID string, rec *nodeVolumeRecord, target string) []*csi.VolumeHealth_VolumeHealthEntry {
	var t *targetRecord
	if rec != nil {
		t = rec.Targets[target]
	}
	if t == nil {
		return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonNotPublishedAtPath,
			"volume %s is not published at %s on node %q", volID, target, n.id)}
	}
	ok := false
	if rec.Kind == kindBlock {
		dev := rec.LoopDevice
		if t.LoopDevice != "" {
			dev = t.LoopDevice
		}
		ok = deviceMountedAt(target, dev)
	} else {
		ok = mountedFrom(target, dataPath(n.lay.volumeDir(volID), kindMount))
	}
	if !ok {
		return []*csi.VolumeHealth_VolumeHealthEntry{healthEntry(csi.VolumeHealthErrorType_INACCESSIBLE, reasonPublishMountMissing,
			"volume %s: target %s no longer shows the volume", volID, target)}
	}
	return nil
}

// lowSpaceFraction is the share of free space under which the state
// directory's filesystem is reported degraded.
const lowSpaceFraction = 0.05

// NodeGetStorageHealth reports problems of the storage behind every volume
// of this node: the state directory and its filesystem, and loop devices for
// block volumes.
func (n *node) NodeGetStorageHealth(ctx context.Context, req *csi.NodeGetStorageHealthRequest) (*csi.NodeGetStorageHealthResponse, error) {
	type backend = csi.NodeGetStorageHealthResponse_StorageBackendHealth
	var out []*backend
	st, err := statFS(n.lay.root)
	if err != nil {
		out = append(out, &backend{Status: csi.StorageHealthErrorType_STORAGE_UNREACHABLE, Reason: "StateDirUnreachable",
			Message: fmt.Sprintf("state directory %s: %v", n.lay.root, err)})
		return &csi.NodeGetStorageHealthResponse{BackendHealth: out}, nil
	}
	if st.readOnly {
		out = append(out, &backend{Status: csi.StorageHealthErrorType_STORAGE_DEGRADED, Reason: "ReadOnlyFilesystem",
			Message: fmt.Sprintf("state directory %s is on a read-only filesystem", n.lay.root)})
	} else if f, err := os.CreateTemp(n.lay.nodeDir(n.id), tmpPrefix+"probe-*"); err != nil {
		out = append(out, &backend{Status: csi.StorageHealthErrorType_STORAGE_DEGRADED, Reason: "StateDirNotWritable",
			Message: fmt.Sprintf("state directory %s: %v", n.lay.root, err)})
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	if st.totalBytes > 0 && float64(st.availBytes) < lowSpaceFraction*float64(st.totalBytes) {
		out = append(out, &backend{Status: csi.StorageHealthErrorType_STORAGE_DEGRADED, Reason: "LowDiskSpace",
			Message: fmt.Sprintf("the filesystem of %s has %d of %d bytes free", n.lay.root, st.availBytes, st.totalBytes)})
	}
	if err := loopAvailable(); err != nil {
		out = append(out, &backend{Status: csi.StorageHealthErrorType_STORAGE_DEGRADED, Reason: "LoopDevicesUnavailable",
			Message:          fmt.Sprintf("block volumes cannot be staged: %v", err),
			VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}})
	}
	return &csi.NodeGetStorageHealthResponse{BackendHealth: out}, nil
}
