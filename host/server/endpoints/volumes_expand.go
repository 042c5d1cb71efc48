package endpoints

import (
	"context"
	"fmt"
	"slices"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// NodeExpander has a node expand a volume it holds staged or published
// with its node plugin (ClientCSI NodeExpandVolume), answering the
// plugin's response and the path the node gave it.
// clientproxy.CSIForwarder implements it.
type NodeExpander interface {
	NodeExpand(ctx context.Context, nodeID, pluginID, volumeID string, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, string, error)
}

// finishExpand follows the plugin's ControllerExpandVolume answer. Without
// node_expansion_required the capacity is recorded at once. With it, every
// node holding the volume staged or published (a claim in use or
// releasing there) is asked to expand it, all at once, and the capacity is
// recorded only once every one of them answered success; a node's failure
// is shown for that node, the capacity stays as it was, and the expand
// may be run again (both CSI calls are idempotent).
func (e *volumesEndpoint) finishExpand(ctx context.Context, v *pb.Volume, resp *csipb.ControllerExpandVolumeResponse, lo, hi int64, secrets map[string]string) (*pb.VolumeExpandResponse, error) {
	capacity := resp.GetCapacityBytes()
	out := &pb.VolumeExpandResponse{CapacityBytes: capacity, NodeExpansionRequired: resp.GetNodeExpansionRequired(), RecordedCapacityBytes: v.GetCapacityBytes()}
	if out.NodeExpansionRequired {
		nodes, err := e.expandNodes(ctx, v, capacity, hi, secrets)
		if err != nil {
			return nil, err
		}
		out.Nodes = nodes
		for _, n := range nodes {
			if n.GetError() != "" {
				out.Meta = &pb.WriteMeta{}
				return out, nil
			}
		}
	}
	reg, err := e.recordExpansion(ctx, v, capacity, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("volume %q was expanded to %d bytes by its plugin but recording it failed (expand again): %w", v.GetId(), capacity, err)
	}
	out.RecordedCapacityBytes, out.Meta = reg.GetVolume().GetCapacityBytes(), reg.GetMeta()
	return out, nil
}

// expandNodes asks every node holding v (a claim of it in use or
// releasing there) to expand it to capacity, at once, and answers one
// result per node, sorted by node ID.
func (e *volumesEndpoint) expandNodes(ctx context.Context, v *pb.Volume, capacity, limit int64, secrets map[string]string) ([]*pb.VolumeNodeExpansion, error) {
	claims, err := e.s.State().ClaimsByVolume(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	held := map[string]*pb.Claim{}
	for _, c := range claims {
		switch c.GetState() {
		case pb.ClaimState_CLAIM_STATE_IN_USE, pb.ClaimState_CLAIM_STATE_RELEASING:
			if _, ok := held[c.GetNodeId()]; !ok {
				held[c.GetNodeId()] = c
			}
		}
	}
	if len(held) > 0 && e.nodes == nil {
		return nil, fmt.Errorf("expanding volume %q: this server makes no node calls", v.GetId())
	}
	out := make([]*pb.VolumeNodeExpansion, 0, len(held))
	var mu sync.Mutex
	var wg sync.WaitGroup
	if limit < capacity {
		// The plugin's answer stands (a limit below it was not the user's).
		limit = 0
	}
	for nodeID, c := range held {
		req := &csipb.NodeExpandVolumeRequest{VolumeId: v.GetExternalId(),
			CapacityRange:    &csipb.CapacityRange{RequiredBytes: capacity, LimitBytes: limit},
			VolumeCapability: rules.CSICapability(c.GetAccessMode(), c.GetAttachmentMode(), v.GetMountOptions()),
			Secrets:          secrets}
		wg.Go(func() {
			r := &pb.VolumeNodeExpansion{NodeId: nodeID}
			resp, _, err := e.nodes.NodeExpand(ctx, nodeID, v.GetPluginId(), v.GetId(), req)
			if err != nil {
				r.Error = err.Error()
				e.s.Logger.Warn("node expansion failed", "volume_id", v.GetId(), "node_id", nodeID, "error", err)
			} else {
				r.CapacityBytes = resp.GetCapacityBytes()
			}
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b *pb.VolumeNodeExpansion) int {
		switch {
		case a.GetNodeId() < b.GetNodeId():
			return -1
		case a.GetNodeId() > b.GetNodeId():
			return 1
		}
		return 0
	})
	return out, nil
}
