//go:build linux

package hostpath

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ValidateVolumeCapabilities confirms the capabilities when every one of
// them can be served by the volume; otherwise it says which cannot and why.
func (c *controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, errInvalid("volume %s: volume_capabilities is missing", id)
	}
	v := c.volume(id)
	if v == nil {
		return nil, errNotFound("volume %s does not exist", id)
	}
	var problems []string
	for i, cp := range req.GetVolumeCapabilities() {
		vc, err := parseCapability(cp)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("volume_capabilities[%d]: %v", i, err))
		case vc.kind != v.Kind:
			problems = append(problems, fmt.Sprintf("volume_capabilities[%d]: %s access, but the volume is a %s volume", i, vc.kind, v.Kind))
		}
	}
	if len(req.GetParameters()) > 0 && !equalMaps(req.GetParameters(), v.Parameters) {
		problems = append(problems, "parameters differ from those the volume was created with")
	}
	if len(req.GetMutableParameters()) > 0 && !equalMaps(req.GetMutableParameters(), v.MutableParameters) {
		problems = append(problems, "mutable_parameters differ from those the volume was created with")
	}
	if len(problems) > 0 {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: fmt.Sprintf("volume %s: %s", id, strings.Join(problems, "; "))}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
		MutableParameters:  req.GetMutableParameters(),
	}}, nil
}

// ListVolumes pages through the volumes, oldest first, with the nodes each is
// published to.
func (c *controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ids := make([]string, 0, len(c.volumes))
	for id := range c.volumes {
		ids = append(ids, id)
	}
	page, next, err := paginate(ids, volumePrefix, req.GetStartingToken(), req.GetMaxEntries())
	if err != nil {
		return nil, err
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, id := range page {
		v := c.volumes[id]
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{
			Volume: c.volumeProto(v),
			Status: &csi.ListVolumesResponse_VolumeStatus{PublishedNodeIds: v.publishedNodes()},
		})
	}
	return resp, nil
}

// ControllerGetVolume reports one volume and the nodes it is published to.
func (c *controller) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errInvalid("volume_id is missing")
	}
	v := c.volume(id)
	if v == nil {
		return nil, errNotFound("volume %s does not exist", id)
	}
	return &csi.ControllerGetVolumeResponse{
		Volume: c.volumeProto(v),
		Status: &csi.ControllerGetVolumeResponse_VolumeStatus{PublishedNodeIds: v.publishedNodes()},
	}, nil
}

// GetCapacity reports the capacity left for volumes with the given
// capabilities, parameters and topology (zero for ones this plugin cannot
// make), and the largest volume CreateVolume would make now: no more than
// what is left nor than MaxVolumeSize.
func (c *controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	zero := &csi.GetCapacityResponse{AvailableCapacity: 0, MaximumVolumeSize: wrapperspb.Int64(0)}
	kind := kindMount
	if len(req.GetVolumeCapabilities()) > 0 {
		k, err := parseCapabilities(req.GetVolumeCapabilities())
		if err != nil {
			return zero, nil
		}
		kind = k
	}
	if _, err := applyParameters(attributes{}, kind, "parameters", req.GetParameters()); err != nil {
		return zero, nil
	}
	if t := req.GetAccessibleTopology(); t != nil {
		nodes, err := c.lay.loadNodes()
		if err != nil {
			return nil, errInternal(err, "read node registrations")
		}
		if _, err := placeVolume(&csi.TopologyRequirement{Requisite: []*csi.Topology{t}}, c.pool, nodes); err != nil {
			return zero, nil
		}
	}
	avail, err := c.available()
	if err != nil {
		return nil, errInternal(err, "measure free space in %s", c.lay.root)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: avail, MaximumVolumeSize: wrapperspb.Int64(min(avail, c.maxSize(kind)))}, nil
}

// ControllerExpandVolume grows a volume: a block image grows at once, a
// mount volume's accounted capacity at once. Both need a node expansion
// (node_expansion_required): the node plugin then makes the loop devices
// see the new size, or the node's view of the mount volume's size
// (NodeGetVolumeStats) grow, online.
func (c *controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errInvalid("volume_id is missing")
	}
	rng := req.GetCapacityRange()
	required, limit := rng.GetRequiredBytes(), rng.GetLimitBytes()
	if rng == nil || required < 0 || limit < 0 || (required == 0 && limit == 0) || (limit > 0 && limit < required) {
		return nil, errInvalid("volume %s: capacity_range required_bytes=%d limit_bytes=%d does not ask for a size", id, required, limit)
	}
	var capKind string
	if req.GetVolumeCapability() != nil {
		vc, err := parseCapability(req.GetVolumeCapability())
		if err != nil {
			return nil, errInvalid("volume %s: volume_capability: %v", id, err)
		}
		capKind = vc.kind
	}
	if !validID(volumePrefix, id) {
		return nil, errNotFound("volume %s does not exist", id)
	}
	unlock, err := c.locks.lock(ctx, "volume/"+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	v := c.volume(id)
	if v == nil {
		return nil, errNotFound("volume %s does not exist", id)
	}
	if capKind != "" && capKind != v.Kind {
		return nil, errInvalid("volume %s is a %s volume, the request has %s access", id, v.Kind, capKind)
	}
	size := required
	if size == 0 {
		size = limit
	}
	if v.Kind == kindBlock && size%512 != 0 {
		size += 512 - size%512
	}
	if limit > 0 && size > limit {
		return nil, errRange("volume %s: block volumes are whole 512-byte sectors; %d bytes exceeds limit_bytes %d", id, size, limit)
	}
	const nodeExpand = true
	if size <= v.CapacityBytes {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.CapacityBytes, NodeExpansionRequired: nodeExpand}, nil
	}
	if err := c.checkMaxSize("volume "+id, v.Kind, size); err != nil {
		return nil, err
	}
	if c.cfg.Capacity > 0 && size > c.cfg.Capacity {
		return nil, errRange("volume %s: %d bytes exceeds the plugin's whole capacity of %d bytes", id, size, c.cfg.Capacity)
	}
	res, err := c.reserve(size-v.CapacityBytes, "expansion of volume "+id)
	if err != nil {
		return nil, err
	}
	defer res.release()
	if v.Kind == kindBlock {
		if err := os.Truncate(dataPath(c.lay.volumeDir(id), kindBlock), size); err != nil {
			return nil, errInternal(err, "grow image of volume %s", id)
		}
	}
	nv := v.clone()
	nv.CapacityBytes = size
	if err := c.putVolume(nv, res); err != nil {
		return nil, errInternal(err, "record new capacity of volume %s", id)
	}
	c.log.Info("volume expanded", "volume", id, "from", v.CapacityBytes, "to", size)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: nodeExpand}, nil
}

// ControllerModifyVolume changes the mutable attributes of a mount volume's
// root directory: its mode, owner and group.
func (c *controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if !validID(volumePrefix, id) {
		return nil, errNotFound("volume %s does not exist", id)
	}
	unlock, err := c.locks.lock(ctx, "volume/"+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	v := c.volume(id)
	if v == nil {
		return nil, errNotFound("volume %s does not exist", id)
	}
	attrs, err := applyParameters(v.Attributes, v.Kind, "mutable_parameters", req.GetMutableParameters())
	if err != nil {
		return nil, errInvalid("volume %s: %v", id, err)
	}
	if v.Kind == kindBlock {
		return &csi.ControllerModifyVolumeResponse{}, nil // nothing mutable; any parameter was refused above
	}
	// Record first, then apply, and apply even when the record already
	// says so: a crash between the two is repaired by the CO's retry.
	if attrs != v.Attributes {
		nv := v.clone()
		nv.Attributes = attrs
		if err := c.putVolume(nv); err != nil {
			return nil, errInternal(err, "record attributes of volume %s", id)
		}
	}
	if err := applyAttributes(dataPath(c.lay.volumeDir(id), kindMount), attrs); err != nil {
		return nil, errInternal(err, "apply attributes to volume %s", id)
	}
	c.log.Info("volume modified", "volume", id, "mode", fmt.Sprintf("%#o", attrs.Mode), "uid", attrs.UID, "gid", attrs.GID)
	return &csi.ControllerModifyVolumeResponse{}, nil
}
