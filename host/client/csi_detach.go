package client

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/volumehooks"
)

// detachAnswerSlack is what NodeDetachVolume leaves of the call's deadline
// for its answer to travel back.
const detachAnswerSlack = time.Second

// volumeDetacher takes a volume off the node (the client's volume hooks,
// nil on a client without them).
type volumeDetacher func(ctx context.Context, volumeID string) (volumehooks.DetachResult, error)

// NodeDetachVolume takes a volume off this node for `berth volume detach`:
// the volume hooks tear down every use of it no live alloc holds and
// unstage it, within the call's deadline. Their node-detached reports go
// to the servers through the Reporter, as a Postrun's do.
func (r *clientCSI) NodeDetachVolume(ctx context.Context, req *pb.CSINodeDetachRequest) (*pb.CSINodeDetachResponse, error) {
	if req.GetNodeId() != "" && req.GetNodeId() != r.nodeID {
		return nil, errcode.Status(fmt.Errorf("detaching volume %q: call for node %s reached node %s: %w", req.GetVolumeId(), req.GetNodeId(), r.nodeID, ErrWrongNode))
	}
	if r.detach == nil {
		return nil, errcode.Status(fmt.Errorf("detaching volume %q from node %s: %w", req.GetVolumeId(), r.nodeID, ErrNoCSIPlugins))
	}
	// The answer (what failed, or that the teardown goes on) must reach
	// the servers before their deadline, which is the call's.
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > 2*detachAnswerSlack {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-detachAnswerSlack))
		defer cancel()
	}
	res, err := r.detach(ctx, req.GetVolumeId())
	if err != nil {
		return nil, errcode.Status(err)
	}
	return &pb.CSINodeDetachResponse{PluginId: res.PluginID, AllocIds: res.Allocs, ClaimIds: res.Claims, Unstaged: res.Unstaged}, nil
}

// csiDetacher is the detach NodeDetachVolume calls: the volume hooks',
// nil on a client without them.
func (c *Client) csiDetacher() volumeDetacher {
	if c.volumes == nil {
		return nil
	}
	hooks := c.volumes.hooks
	return func(ctx context.Context, volumeID string) (volumehooks.DetachResult, error) {
		return hooks.Detach(ctx, volumehooks.DetachRequest{VolumeID: volumeID, Live: c.allocLive,
			NodePlugin: func(pluginID string) error {
				_, err := c.plugins.Node(pluginID)
				return err
			}})
	}
}
