package csi

import (
	"context"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// NodeClient makes the calls of the CSI Node service.
type NodeClient struct {
	c   *caller
	rpc csipb.NodeClient
}

// NodeCapabilities is the set of RPCs NodeGetCapabilities reports.
type NodeCapabilities []csipb.NodeServiceCapability_RPC_Type

// Has reports whether the node service advertises t.
func (n NodeCapabilities) Has(t csipb.NodeServiceCapability_RPC_Type) bool {
	return slices.Contains(n, t)
}

// NodeGetCapabilities returns the node service's RPC capabilities.
func (c *NodeClient) NodeGetCapabilities(ctx context.Context) (NodeCapabilities, error) {
	resp, err := invoke(ctx, c.c, CallNodeGetCapabilities, "", &csipb.NodeGetCapabilitiesRequest{}, c.rpc.NodeGetCapabilities)
	if err != nil {
		return nil, err
	}
	caps := NodeCapabilities{}
	for _, cp := range resp.GetCapabilities() {
		if r := cp.GetRpc(); r != nil {
			caps = appendUnique(caps, r.GetType())
		}
	}
	return caps, nil
}

// NodeGetInfo returns the plugin's ID for this node (what
// ControllerPublishVolume needs), its volume limit and topology. A response
// without a node ID fails with ErrInvalidResponse.
func (c *NodeClient) NodeGetInfo(ctx context.Context) (*csipb.NodeGetInfoResponse, error) {
	resp, err := invoke(ctx, c.c, CallNodeGetInfo, "", &csipb.NodeGetInfoRequest{}, c.rpc.NodeGetInfo)
	if err != nil {
		return nil, err
	}
	if resp.GetNodeId() == "" {
		return nil, invalidResponse(CallNodeGetInfo, "", "node_id is empty")
	}
	return resp, nil
}

// NodeStageVolume makes a volume available at the staging path, once per
// node and volume.
func (c *NodeClient) NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallNodeStageVolume, id,
		field{"volume_id", id != ""},
		field{"staging_target_path", req.GetStagingTargetPath() != ""},
		field{"volume_capability", req.GetVolumeCapability() != nil}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallNodeStageVolume, id, req, c.rpc.NodeStageVolume)
}

// NodeUnstageVolume undoes NodeStageVolume. A volume the plugin does not
// know is not staged: NotFound is success (CallSpec.NotFoundIsSuccess).
func (c *NodeClient) NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallNodeUnstageVolume, id,
		field{"volume_id", id != ""},
		field{"staging_target_path", req.GetStagingTargetPath() != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallNodeUnstageVolume, id, req, c.rpc.NodeUnstageVolume)
}

// NodePublishVolume makes a volume available at the target path, once per
// allocation.
func (c *NodeClient) NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallNodePublishVolume, id,
		field{"volume_id", id != ""},
		field{"target_path", req.GetTargetPath() != ""},
		field{"volume_capability", req.GetVolumeCapability() != nil}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallNodePublishVolume, id, req, c.rpc.NodePublishVolume)
}

// NodeUnpublishVolume undoes NodePublishVolume. A volume the plugin does not
// know is not published: NotFound is success (CallSpec.NotFoundIsSuccess).
func (c *NodeClient) NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallNodeUnpublishVolume, id,
		field{"volume_id", id != ""},
		field{"target_path", req.GetTargetPath() != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallNodeUnpublishVolume, id, req, c.rpc.NodeUnpublishVolume)
}

// NodeGetVolumeStats returns usage and condition of a published or staged
// volume.
func (c *NodeClient) NodeGetVolumeStats(ctx context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallNodeGetVolumeStats, id,
		field{"volume_id", id != ""},
		field{"volume_path", req.GetVolumePath() != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallNodeGetVolumeStats, id, req, c.rpc.NodeGetVolumeStats)
}

// NodeExpandVolume grows the filesystem of a volume on this node.
func (c *NodeClient) NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if err := required(CallNodeExpandVolume, id,
		field{"volume_id", id != ""},
		field{"volume_path", req.GetVolumePath() != ""}); err != nil {
		return nil, err
	}
	return invoke(ctx, c.c, CallNodeExpandVolume, id, req, c.rpc.NodeExpandVolume)
}
