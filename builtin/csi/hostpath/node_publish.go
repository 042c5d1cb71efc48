//go:build linux

package hostpath

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// NodePublishVolume makes a staged volume available at a workload's target
// path: a bind mount of the staging path (a directory), or of the loop device
// (a file) for block volumes. Read-only publishes are enforced by the kernel:
// a read-only mount, or a read-only loop device of its own for a block volume
// staged writable.
func (n *node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	volID := req.GetVolumeId()
	if volID == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if req.GetTargetPath() == "" {
		return nil, errInvalid("volume %s: target_path is missing", volID)
	}
	vc, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, errInvalid("volume %s: volume_capability: %v", volID, err)
	}
	target, err := cleanAbs("target_path", req.GetTargetPath())
	if err != nil {
		return nil, errInvalid("volume %s: %v", volID, err)
	}
	if req.GetStagingTargetPath() == "" {
		return nil, errPrecondition("volume %s: staging_target_path is missing; this plugin stages volumes, call NodeStageVolume first", volID)
	}
	staging, err := cleanAbs("staging_target_path", req.GetStagingTargetPath())
	if err != nil {
		return nil, errInvalid("volume %s: %v", volID, err)
	}
	ctxRO, err := n.checkPublishContext(volID, req.GetPublishContext())
	if err != nil {
		return nil, err
	}
	v, unlock, err := n.lockVolume(ctx, volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkAccessType(v, vc, "published"); err != nil {
		return nil, err
	}
	rec, err := n.loadNodeVolume(volID)
	if err != nil {
		return nil, err
	}
	if rec == nil || rec.StagingPath != staging {
		return nil, errPrecondition("volume %s is not staged at %s on node %q; call NodeStageVolume first", volID, staging, n.id)
	}
	ro := req.GetReadonly() || ctxRO || isReaderOnly(vc.mode) || vc.flags.readOnly || rec.StageReadOnly

	if t, ok := rec.Targets[target]; ok {
		if !sameCapability(t.Capability, req.GetVolumeCapability()) || t.ReadOnly != ro {
			return nil, errExists("volume %s is already published at %s with another capability or readonly flag (readonly=%t)", volID, target, t.ReadOnly)
		}
	} else if err := checkTargetConflicts(volID, rec, req.GetVolumeCapability(), vc.mode, ro); err != nil {
		return nil, err
	}
	t := rec.Targets[target]
	if t == nil {
		t = &targetRecord{Capability: encodeCapability(req.GetVolumeCapability()), ReadOnly: ro}
	}
	if err := n.restage(v, rec); err != nil {
		return nil, errInternal(err, "repair staging of volume %s at %s", volID, staging)
	}
	if err := n.publish(v, rec, target, t, vc); err != nil {
		return nil, errInternal(err, "publish volume %s at %s", volID, target)
	}
	if rec.Targets == nil {
		rec.Targets = map[string]*targetRecord{}
	}
	rec.Targets[target] = t
	if err := n.saveNodeVolume(rec); err != nil {
		return nil, errInternal(err, "record publish of volume %s at %s", volID, target)
	}
	n.log.Info("volume published", "volume", volID, "target", target, "readonly", ro)
	return &csi.NodePublishVolumeResponse{}, nil
}

// checkTargetConflicts applies the CSI rules for publishing a volume at a
// second target path on one node: the same capability each time, one target
// for SINGLE_NODE_SINGLE_WRITER, one writable target for the other
// single-writer modes.
func checkTargetConflicts(volID string, rec *nodeVolumeRecord, c *csi.VolumeCapability, mode csi.VolumeCapability_AccessMode_Mode, ro bool) error {
	for path, other := range rec.Targets {
		if !sameCapability(other.Capability, c) {
			return errPrecondition("volume %s is already published at %s with another volume capability", volID, path)
		}
		if mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
			return errPrecondition("volume %s has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %s", volID, path)
		}
		if singleWriter(mode) && !ro && !other.ReadOnly {
			return errPrecondition("volume %s has access mode %s and already has a writer at %s", volID, modeName(mode), path)
		}
	}
	return nil
}

func (n *node) publish(v *volumeRecord, rec *nodeVolumeRecord, target string, t *targetRecord, vc volCap) error {
	if v.Kind == kindBlock {
		dev := rec.LoopDevice
		if t.ReadOnly && !rec.StageReadOnly {
			tag := loopTag(n.id, "publish:"+target)
			image := n.data(v)
			if t.LoopDevice == "" || !loopBacks(t.LoopDevice, image, true, tag) {
				d, ok := findLoop(image, true, tag)
				if !ok {
					var err error
					if d, err = attachLoop(image, true, tag); err != nil {
						return err
					}
				}
				t.LoopDevice = d
			}
			dev = t.LoopDevice
		}
		if deviceMountedAt(target, dev) {
			return nil
		}
		if mounted, err := isMountPoint(target); err != nil || mounted {
			return errOrBusyPath(err, target)
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o660)
		if err != nil {
			return err
		}
		f.Close()
		return bindMount(dev, target, mountFlags{readOnly: t.ReadOnly})
	}
	if mountedFrom(target, n.data(v)) {
		return nil
	}
	if mounted, err := isMountPoint(target); err != nil || mounted {
		return errOrBusyPath(err, target)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	flags := vc.flags
	flags.readOnly = t.ReadOnly
	return bindMount(rec.StagingPath, target, flags)
}

// NodeUnpublishVolume unmounts a target path and removes it. A target this
// node does not know for the volume is left alone (idempotent), unless it
// visibly shows the volume, as a crash between mounting and recording leaves
// it.
func (n *node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volID := req.GetVolumeId()
	target, err := volumePath(volID, "target_path", req.GetTargetPath())
	if err != nil {
		return nil, err
	}
	if !validID(volumePrefix, volID) {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	unlock, err := n.locks.lock(ctx, "volume/"+volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := n.loadNodeVolume(volID)
	if err != nil {
		return nil, err
	}
	var t *targetRecord
	if rec != nil {
		t = rec.Targets[target]
	}
	if t == nil {
		if err := n.unpublishUnrecorded(volID, rec, target); err != nil {
			return nil, errInternal(err, "unpublish volume %s from %s", volID, target)
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if err := unmountAll(target); err != nil {
		return nil, errInternal(err, "unpublish volume %s from %s", volID, target)
	}
	if t.LoopDevice != "" && loopBacks(t.LoopDevice, dataPath(n.lay.volumeDir(volID), kindBlock), true, loopTag(n.id, "publish:"+target)) {
		if err := detachLoop(t.LoopDevice); err != nil {
			return nil, errInternal(err, "unpublish volume %s from %s", volID, target)
		}
	}
	if err := n.removeTarget(target); err != nil {
		return nil, errInternal(err, "remove target %s of volume %s", target, volID)
	}
	// The target's removal is the record of the unpublish
	// (node_unpublished.go); a target kept for what was written into it
	// while unmounted is recorded gone.
	if targetExists(target) {
		delete(rec.Targets, target)
		if err := n.saveNodeVolume(rec); err != nil {
			return nil, errInternal(err, "record unpublish of volume %s from %s", volID, target)
		}
	}
	n.log.Info("volume unpublished", "volume", volID, "target", target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (n *node) unpublishUnrecorded(volID string, rec *nodeVolumeRecord, target string) error {
	dir := n.lay.volumeDir(volID)
	shows := mountedFrom(target, dataPath(dir, kindMount))
	if rec != nil && rec.LoopDevice != "" && deviceMountedAt(target, rec.LoopDevice) {
		shows = true
	}
	if dev, ok := findLoop(dataPath(dir, kindBlock), true, loopTag(n.id, "publish:"+target)); ok {
		if deviceMountedAt(target, dev) {
			if err := unmountAll(target); err != nil {
				return err
			}
			shows = true
		}
		if err := detachLoop(dev); err != nil {
			return err
		}
	}
	if !shows {
		return nil
	}
	if err := unmountAll(target); err != nil {
		return err
	}
	return n.removeTarget(target)
}

// removeTarget deletes the directory or file made for a publish. A
// directory something wrote into while unmounted is kept (and logged): it
// holds data that is not ours to delete.
func (n *node) removeTarget(target string) error {
	err := os.Remove(target)
	switch {
	case err == nil, errors.Is(err, os.ErrNotExist):
		return nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		n.log.Warn("target path not removed: it holds files of its own", "target", target)
		return nil
	}
	return err
}
