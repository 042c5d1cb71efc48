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
type volumeDetacher func(ctx context.Context, volumeID string, users []volumehooks.DetachUser) (volumehooks.DetachResult, error)

// NodeDetachVolume takes a volume off this node for `berth volume detach`:
// the volume hooks tear down the uses of the users the servers listed
// (their claims releasing) and unstage it when none is left, within the
// call's deadline, and answer for each user: done, not held here, or
// failed. A listed alloc the client still runs (its tasks not all dead)
// refuses the call. The node-detached reports go to the servers through
// the Reporter, as a Postrun's do.
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
	users := make([]volumehooks.DetachUser, len(req.GetUsers()))
	for i, u := range req.GetUsers() {
		users[i] = volumehooks.DetachUser{ClaimID: u.GetClaimId(), AllocID: u.GetAllocId()}
	}
	res, err := r.detach(ctx, req.GetVolumeId(), users)
	if err != nil {
		return nil, errcode.Status(err)
	}
	resp := &pb.CSINodeDetachResponse{PluginId: res.PluginID, AllocIds: res.Allocs, ClaimIds: res.Claims, Unstaged: res.Unstaged}
	for _, u := range res.Users {
		out := &pb.CSINodeDetachResult{User: &pb.CSINodeDetachUser{ClaimId: u.User.ClaimID, AllocId: u.User.AllocID}}
		switch u.Outcome {
		case volumehooks.DetachDone:
			out.Outcome = pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_DONE
		case volumehooks.DetachNotHeld:
			out.Outcome = pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_NOT_HELD
		default:
			out.Outcome = pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_FAILED
			out.Error = u.Err.Error()
		}
		resp.Results = append(resp.Results, out)
	}
	return resp, nil
}

// csiDetacher is the detach NodeDetachVolume calls: the volume hooks',
// nil on a client without them.
func (c *Client) csiDetacher() volumeDetacher {
	if c.volumes == nil {
		return nil
	}
	hooks := c.volumes.hooks
	return func(ctx context.Context, volumeID string, users []volumehooks.DetachUser) (volumehooks.DetachResult, error) {
		return hooks.Detach(ctx, volumehooks.DetachRequest{VolumeID: volumeID, Users: users, Live: c.allocHoldsVolumes,
			NodePlugin: func(pluginID string) error {
				_, err := c.plugins.Node(pluginID)
				return err
			}})
	}
}
