package client

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// nodeExpander makes a node expansion of a volume the node holds
// (*volumemanager.Manager).
type nodeExpander interface {
	Expand(ctx context.Context, volumeID, pluginID string, req *csipb.NodeExpandVolumeRequest) (volumemanager.ExpandResult, error)
}

var _ nodeExpander = (*volumemanager.Manager)(nil)

// NodeExpandVolume has the volume's node plugin grow it where this node
// holds it staged or published, after the servers' ControllerExpandVolume
// answered node_expansion_required. The plugin's code comes back as it
// gave it; the message names the volume, plugin and node.
func (r *clientCSI) NodeExpandVolume(ctx context.Context, req *pb.CSINodeExpandRequest) (*pb.CSINodeExpandResponse, error) {
	vol, plugin := req.GetVolumeId(), req.GetPluginId()
	fail := func(err error) error {
		return errcode.Status(fmt.Errorf("node expansion of volume %q (csi plugin %q) on node %s: %w", vol, plugin, r.nodeID, err))
	}
	if req.GetNodeId() != "" && req.GetNodeId() != r.nodeID {
		return nil, fail(fmt.Errorf("call for node %s reached node %s: %w", req.GetNodeId(), r.nodeID, ErrWrongNode))
	}
	in := &csipb.NodeExpandVolumeRequest{}
	if err := proto.Unmarshal(req.GetRequest(), in); err != nil {
		return nil, fail(fmt.Errorf("%w: NodeExpandVolume request: %v", ErrBadCSICall, err))
	}
	var ex nodeExpander
	if r.expander != nil {
		ex = r.expander()
	}
	if ex == nil {
		return nil, fail(ErrNoCSIPlugins)
	}
	res, err := ex.Expand(ctx, vol, plugin, in)
	if err != nil {
		// The plugin's own code (the nearest wrapped), the whole text.
		return nil, fail(err)
	}
	b, err := proto.Marshal(&csipb.NodeExpandVolumeResponse{CapacityBytes: res.CapacityBytes})
	if err != nil {
		return nil, fail(err)
	}
	return &pb.CSINodeExpandResponse{Response: b, VolumePath: res.VolumePath}, nil
}

// csiExpander is what ClientCSI's NodeExpandVolume calls: the node volume
// manager, nil for a client without CSI volumes.
func (c *Client) csiExpander() nodeExpander {
	if c.volumes == nil {
		return nil
	}
	return c.volumes.manager
}
