//go:build linux

package hostpath

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// usedAt checks that path is where this node staged or published the volume
// and returns the node's record of it.
func (n *node) usedAt(volID, path string) (*nodeVolumeRecord, error) {
	rec, err := n.loadNodeVolume(volID)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, errNotFound("volume %s is not staged or published on node %q", volID, n.id)
	}
	p, err := cleanAbs("volume_path", path)
	if err != nil {
		return nil, errNotFound("volume %s: %v; it is staged at %s", volID, err, rec.StagingPath)
	}
	if p != rec.StagingPath && rec.Targets[p] == nil {
		return nil, errNotFound("volume %s is not staged or published at %s on node %q", volID, p, n.id)
	}
	return rec, nil
}

// NodeGetVolumeStats reports a volume's capacity and what its content takes.
// For a mount volume the bytes used are measured by walking it and the bytes
// available are what is left of its capacity as this node sees it (never
// more than its filesystem has free); inodes are those it uses and those its filesystem has free. For
// a block volume only the size is known.
func (n *node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	volID, path := req.GetVolumeId(), req.GetVolumePath()
	if volID == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if path == "" {
		return nil, errInvalid("volume %s: volume_path is missing", volID)
	}
	v, err := n.loadVolume(volID)
	if err != nil {
		return nil, err
	}
	rec, err := n.usedAt(volID, path)
	if err != nil {
		return nil, err
	}
	if v.Kind == kindBlock {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: v.CapacityBytes},
		}}, nil
	}
	data := n.data(v)
	u, err := diskUsage(ctx, data)
	if err != nil {
		return nil, errInternal(err, "measure volume %s", volID)
	}
	fs, err := statFS(data)
	if err != nil {
		return nil, errInternal(err, "measure filesystem of volume %s", volID)
	}
	total := v.CapacityBytes
	if rec.CapacityBytes > 0 {
		total = rec.CapacityBytes
	}
	avail := min(max(0, total-u.bytes), fs.availBytes)
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: total, Used: u.bytes, Available: avail},
		{Unit: csi.VolumeUsage_INODES, Total: u.inodes + fs.freeInodes, Used: u.inodes, Available: fs.freeInodes},
	}}, nil
}

// NodeExpandVolume makes the node see a volume's new size after
// ControllerExpandVolume: the loop devices of a block volume re-read their
// image's size; a mount volume's size on this node (what
// NodeGetVolumeStats reports) becomes the volume's. Asking for more than
// the volume has is OutOfRange.
func (n *node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	volID, path := req.GetVolumeId(), req.GetVolumePath()
	if volID == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if path == "" {
		return nil, errInvalid("volume %s: volume_path is missing", volID)
	}
	var capKind string
	if req.GetVolumeCapability() != nil {
		vc, err := parseCapability(req.GetVolumeCapability())
		if err != nil {
			return nil, errInvalid("volume %s: volume_capability: %v", volID, err)
		}
		capKind = vc.kind
	}
	if !validID(volumePrefix, volID) {
		return nil, errNotFound("volume %s does not exist", volID)
	}
	v, unlock, err := n.lockVolume(ctx, volID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := n.usedAt(volID, path)
	if err != nil {
		return nil, err
	}
	if capKind != "" && capKind != v.Kind {
		return nil, errInvalid("volume %s is a %s volume, the request has %s access", volID, v.Kind, capKind)
	}
	if want := req.GetCapacityRange().GetRequiredBytes(); want > v.CapacityBytes {
		return nil, errRange("volume %s has %d bytes, less than the %d asked; call ControllerExpandVolume first", volID, v.CapacityBytes, want)
	}
	if v.Kind == kindMount {
		if rec.CapacityBytes != v.CapacityBytes {
			nrec := *rec
			nrec.CapacityBytes = v.CapacityBytes
			if err := n.saveNodeVolume(&nrec); err != nil {
				return nil, errInternal(err, "record the new size of volume %s on node %q", volID, n.id)
			}
			n.log.Info("volume expanded on node", "volume", volID, "from", rec.CapacityBytes, "bytes", v.CapacityBytes)
		}
		return &csi.NodeExpandVolumeResponse{CapacityBytes: v.CapacityBytes}, nil
	}
	size := v.CapacityBytes
	devs := []string{rec.LoopDevice}
	for _, t := range rec.Targets {
		if t.LoopDevice != "" {
			devs = append(devs, t.LoopDevice)
		}
	}
	for _, dev := range devs {
		if dev == "" {
			continue
		}
		got, err := refreshLoopCapacity(dev)
		if err != nil {
			return nil, errInternal(err, "expand volume %s on node %q", volID, n.id)
		}
		size = got
	}
	n.log.Info("volume expanded on node", "volume", volID, "bytes", size)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
