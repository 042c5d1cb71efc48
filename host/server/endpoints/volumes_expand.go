package endpoints

import (
	"context"
	"fmt"
	"slices"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// NodeExpander has a node expand a volume it holds staged or published
// with its node plugin (ClientCSI NodeExpandVolume), answering the
// plugin's response and the path the node gave it.
// clientproxy.CSIForwarder implements it.
type NodeExpander interface {
	NodeExpand(ctx context.Context, nodeID, pluginID, volumeID string, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, string, error)
}

// nodeExpansionSince is the first berth version whose servers record a
// node expansion a client made at stage (ClaimTransition
// node_expanded_bytes).
var nodeExpansionSince = versions.MustConstraint(">= " + NodeExpansionSinceVersion)

// NodeExpansionSinceVersion is the version nodeExpansionSince names.
const NodeExpansionSinceVersion = "0.1.0-dev.4"

// nodeExpandedBytes is the node expansion req reports with its in-use
// move, 0 while some server is older than nodeExpansionSince (it would
// not record it: the pending expansion then stays, and volume expand
// completes it).
func nodeExpandedBytes(s *api, req *pb.ClientClaimUpdateRequest) int64 {
	if req.GetNodeExpandedBytes() <= 0 || req.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE || req.GetError() != nil {
		return 0
	}
	if s.RequireServersAt(nodeExpansionSince, NodeExpansionSinceVersion, "node expansions reported with in-use") != nil {
		return 0
	}
	return req.GetNodeExpandedBytes()
}

// finishExpand follows the plugin's ControllerExpandVolume answer. Without
// node_expansion_required the capacity is recorded at once. With it, every
// node holding the volume staged or published (a claim in use or
// releasing there) is asked to expand it, all at once, and the capacity is
// recorded only once every one of them answered success. A node's failure
// is shown for that node; then, and when no node holds the volume, the
// capacity stays as it was and the expansion is recorded as pending
// (node_expansion_pending_bytes): the next node to stage or publish the
// volume makes it and reports it, and an expand run again retries the
// nodes (both CSI calls are idempotent).
func (e *volumesEndpoint) finishExpand(ctx context.Context, v *pb.Volume, resp *csipb.ControllerExpandVolumeResponse, lo, hi int64, secrets map[string]string) (*pb.VolumeExpandResponse, error) {
	capacity := resp.GetCapacityBytes()
	out := &pb.VolumeExpandResponse{CapacityBytes: capacity, NodeExpansionRequired: resp.GetNodeExpansionRequired()}
	record, pending := capacity, int64(0)
	if out.NodeExpansionRequired {
		nodes, err := e.expandNodes(ctx, v, capacity, hi, secrets)
		if err != nil {
			return nil, err
		}
		out.Nodes = nodes
		complete := len(nodes) > 0
		for _, n := range nodes {
			if n.GetError() != "" {
				complete = false
			}
		}
		if !complete {
			record, pending = v.GetCapacityBytes(), max(capacity, v.GetNodeExpansionPendingBytes())
		}
	}
	reg, err := e.recordExpansion(ctx, v, record, pending, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("volume %q was expanded to %d bytes by its plugin but recording it failed (expand again): %w", v.GetId(), capacity, err)
	}
	out.RecordedCapacityBytes, out.NodeExpansionPendingBytes, out.Meta = reg.GetVolume().GetCapacityBytes(), reg.GetVolume().GetNodeExpansionPendingBytes(), reg.GetMeta()
	return out, nil
}

// expandNodeOnly expands v with a plugin that has no controller service:
// CSI has the CO call NodeExpandVolume alone, for the size asked. The
// plugin's node instances must advertise EXPAND_VOLUME.
func (e *volumesEndpoint) expandNodeOnly(ctx context.Context, v *pb.Volume, lo, hi int64, secrets map[string]string) (*pb.VolumeExpandResponse, error) {
	p, err := e.s.State().CSIPluginByID(nil, v.GetPluginId())
	if err != nil {
		return nil, err
	}
	can := false
	for _, n := range p.GetNodes() {
		can = can || n.GetNodeInfo().GetSupportsExpand()
	}
	if !can {
		return nil, fmt.Errorf("expanding volume %q: csi plugin %q: %w: it has no controller service and no node instance with EXPAND_VOLUME",
			v.GetId(), v.GetPluginId(), ErrPluginCannot)
	}
	size := lo
	if size <= 0 {
		size = hi
	}
	return e.finishExpand(ctx, v, &csipb.ControllerExpandVolumeResponse{CapacityBytes: max(size, v.GetCapacityBytes()), NodeExpansionRequired: true}, lo, hi, secrets)
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
