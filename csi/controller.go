package csi

import (
	"context"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// ControllerClient makes the calls of the CSI Controller service.
type ControllerClient struct {
	c   *caller
	rpc csipb.ControllerClient
}

// ControllerCapabilities is the set of RPCs ControllerGetCapabilities reports.
type ControllerCapabilities []csipb.ControllerServiceCapability_RPC_Type

// Has reports whether the controller advertises t.
func (c ControllerCapabilities) Has(t csipb.ControllerServiceCapability_RPC_Type) bool {
	return slices.Contains(c, t)
}

// ControllerGetCapabilities returns the controller's RPC capabilities.
func (c *ControllerClient) ControllerGetCapabilities(ctx context.Context) (ControllerCapabilities, error) {
	resp, err := invoke(ctx, c.c, CallControllerGetCapabilities, "", &csipb.ControllerGetCapabilitiesRequest{}, c.rpc.ControllerGetCapabilities)
	if err != nil {
		return nil, err
	}
	caps := ControllerCapabilities{}
	for _, cp := range resp.GetCapabilities() {
		if r := cp.GetRpc(); r != nil {
			caps = appendUnique(caps, r.GetType())
		}
	}
	return caps, nil
}

// CreateVolume creates a volume, or returns the existing one of the same
// name. Errors carry the requested name as their VolumeID. A response without
// a volume ID fails with ErrInvalidResponse.
func (c *ControllerClient) CreateVolume(ctx context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	name := req.GetName()
	if err := required(CallCreateVolume, name,
		field{"name", name != ""},
		field{"volume_capabilities", len(req.GetVolumeCapabilities()) > 0}); err != nil {
		return nil, err
	}
	resp, err := invoke(ctx, c.c, CallCreateVolume, name, req, c.rpc.CreateVolume)
	if err != nil {
		return nil, err
	}
	if resp.GetVolume().GetVolumeId() == "" {
		return nil, invalidResponse(CallCreateVolume, name, "volume.volume_id is empty")
	}
	return resp, nil
}

// DeleteVolume deletes a volume. A volume the plugin does not know is
// already deleted: NotFound is success (CallSpec.NotFoundIsSuccess).
func (c *ControllerClient) DeleteVolume(ctx context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallDeleteVolume, id, field{"volume_id", id != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallDeleteVolume, id, req, c.rpc.DeleteVolume)
}

// ControllerPublishVolume attaches a volume to a node; the response's
// publish context is what NodeStageVolume and NodePublishVolume need.
func (c *ControllerClient) ControllerPublishVolume(ctx context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallControllerPublishVolume, id,
		field{"volume_id", id != ""},
		field{"node_id", req.GetNodeId() != ""},
		field{"volume_capability", req.GetVolumeCapability() != nil}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallControllerPublishVolume, id, req, c.rpc.ControllerPublishVolume)
}

// ControllerUnpublishVolume detaches a volume from a node. A volume or node
// the plugin does not know is not attached: NotFound is success (CallSpec.NotFoundIsSuccess).
func (c *ControllerClient) ControllerUnpublishVolume(ctx context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallControllerUnpublishVolume, id, field{"volume_id", id != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallControllerUnpublishVolume, id, req, c.rpc.ControllerUnpublishVolume)
}

// ListVolumes returns one page of the plugin's volumes.
func (c *ControllerClient) ListVolumes(ctx context.Context, req *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	if req == nil {
		req = &csipb.ListVolumesRequest{}
	}
	return invoke(ctx, c.c, CallListVolumes, "", req, c.rpc.ListVolumes)
}

// GetCapacity returns the capacity available for new volumes.
func (c *ControllerClient) GetCapacity(ctx context.Context, req *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	if req == nil {
		req = &csipb.GetCapacityRequest{}
	}
	return invoke(ctx, c.c, CallGetCapacity, "", req, c.rpc.GetCapacity)
}

// ControllerGetVolume returns a volume's current state as the plugin sees it.
// A response without the volume fails with ErrInvalidResponse.
func (c *ControllerClient) ControllerGetVolume(ctx context.Context, req *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallControllerGetVolume, id, field{"volume_id", id != ""}); err != nil {
		return nil, err
	}
	resp, err := invoke(ctx, c.c, CallControllerGetVolume, id, req, c.rpc.ControllerGetVolume)
	if err != nil {
		return nil, err
	}
	if resp.GetVolume() == nil {
		return nil, invalidResponse(CallControllerGetVolume, id, "volume is empty")
	}
	return resp, nil
}

// ControllerExpandVolume grows a volume on the storage side.
func (c *ControllerClient) ControllerExpandVolume(ctx context.Context, req *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallControllerExpandVolume, id,
		field{"volume_id", id != ""},
		field{"capacity_range", req.GetCapacityRange() != nil}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallControllerExpandVolume, id, req, c.rpc.ControllerExpandVolume)
}

// CreateSnapshot snapshots a volume; errors carry the source volume's ID.
func (c *ControllerClient) CreateSnapshot(ctx context.Context, req *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	id := req.GetSourceVolumeId()
	if err := required(CallCreateSnapshot, id,
		field{"source_volume_id", id != ""},
		field{"name", req.GetName() != ""}); err != nil {
		return nil, err
	}
	resp, err := invoke(ctx, c.c, CallCreateSnapshot, id, req, c.rpc.CreateSnapshot)
	if err != nil {
		return nil, err
	}
	if resp.GetSnapshot().GetSnapshotId() == "" {
		return nil, invalidResponse(CallCreateSnapshot, id, "snapshot.snapshot_id is empty")
	}
	return resp, nil
}

// DeleteSnapshot deletes a snapshot. A snapshot the plugin does not know is
// already deleted: NotFound is success (CallSpec.NotFoundIsSuccess).
func (c *ControllerClient) DeleteSnapshot(ctx context.Context, req *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	if err := required(CallDeleteSnapshot, "", field{"snapshot_id", req.GetSnapshotId() != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallDeleteSnapshot, "", req, c.rpc.DeleteSnapshot)
}

// ListSnapshots returns one page of the plugin's snapshots.
func (c *ControllerClient) ListSnapshots(ctx context.Context, req *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	if req == nil {
		req = &csipb.ListSnapshotsRequest{}
	}
	return invoke(ctx, c.c, CallListSnapshots, req.GetSourceVolumeId(), req, c.rpc.ListSnapshots)
}
