package endpoints

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/errcode"
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
//
// It is 0 too when the volume has no node expansion pending, or a smaller
// one than reported: a client reports the pending size it made at stage,
// so more is not an expansion the servers asked for, and recording it
// would raise the capacity beyond what the plugin made.
func nodeExpandedBytes(s *api, req *pb.ClientClaimUpdateRequest, v *pb.Volume) int64 {
	if req.GetNodeExpandedBytes() <= 0 || req.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE || req.GetError() != nil {
		return 0
	}
	if p := v.GetNodeExpansionPendingBytes(); p <= 0 || req.GetNodeExpandedBytes() > p {
		s.Logger.Debug("dropping a node expansion reported with in-use: not the pending one", "volume_id", v.GetId(),
			"node_id", req.GetNodeId(), "claim_id", req.GetClaimId(), "reported_bytes", req.GetNodeExpandedBytes(), "pending_bytes", p)
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
// is shown for that node; a node that no longer holds the volume (its
// teardown finished meanwhile) has nothing to expand and is shown so. The
// capacity stays as it was and the expansion is recorded as pending
// (node_expansion_pending_bytes) when a node failed, when no node made
// it, and when a node is still staging the volume (a claim reserved or
// ready there and none in use or releasing): such a node read the volume
// before the pending size was set, so the expansion must stay pending for
// its stage (or the next one) to make it and report it. An expand run
// again retries the nodes (both CSI calls are idempotent).
func (e *volumesEndpoint) finishExpand(ctx context.Context, v *pb.Volume, resp *csipb.ControllerExpandVolumeResponse, lo, hi int64, secrets map[string]string) (*pb.VolumeExpandResponse, error) {
	capacity := resp.GetCapacityBytes()
	out := &pb.VolumeExpandResponse{CapacityBytes: capacity, NodeExpansionRequired: resp.GetNodeExpansionRequired()}
	complete := true
	if out.NodeExpansionRequired {
		nodes, staging, err := e.expandNodes(ctx, v, capacity, hi, secrets)
		if err != nil {
			return nil, err
		}
		out.Nodes = nodes
		expanded := 0
		for _, n := range nodes {
			switch {
			case n.GetError() != "":
				complete = false
			case !n.GetNotHeld():
				expanded++
			}
		}
		complete = complete && expanded > 0 && !staging
	}
	reg, err := e.recordExpansion(ctx, v, capacity, complete, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("volume %q was expanded to %d bytes by its plugin but recording it failed (expand again): %w", v.GetId(), capacity, err)
	}
	out.RecordedCapacityBytes, out.NodeExpansionPendingBytes, out.Meta = reg.GetVolume().GetCapacityBytes(), reg.GetVolume().GetNodeExpansionPendingBytes(), reg.GetMeta()
	return out, nil
}

// expansionOn is volume v (as read now) after an expand that made
// capacity (complete) or left it to the nodes (not complete). Computed
// on each read, so expands that ran meanwhile are kept: a pending size
// is never lowered, and a complete expand clears only a pending size it
// made (at most capacity); capacity only grows.
func expansionOn(v *pb.Volume, capacity int64, complete bool) (recorded, pending int64) {
	pending = v.GetNodeExpansionPendingBytes()
	if !complete {
		return v.GetCapacityBytes(), max(capacity, pending)
	}
	if pending <= capacity {
		pending = 0
	}
	return max(capacity, v.GetCapacityBytes()), pending
}

// expandNodeOnly expands v with a plugin that has no controller service,
// or whose controllers lack EXPAND_VOLUME (CSI: a plugin expands on the
// controller, the node or both): the CO calls NodeExpandVolume alone, for
// the size asked. The plugin's node instances must advertise
// EXPAND_VOLUME.
func (e *volumesEndpoint) expandNodeOnly(ctx context.Context, v *pb.Volume, lo, hi int64, secrets map[string]string) (*pb.VolumeExpandResponse, error) {
	can, err := e.nodesCanExpand(v.GetPluginId())
	if err != nil {
		return nil, err
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

// nodesCanExpand is whether a node instance of the plugin advertises
// EXPAND_VOLUME.
func (e *volumesEndpoint) nodesCanExpand(pluginID string) (bool, error) {
	p, err := e.s.State().CSIPluginByID(nil, pluginID)
	if err != nil {
		return false, err
	}
	for _, n := range p.GetNodes() {
		if n.GetNodeInfo().GetSupportsExpand() {
			return true, nil
		}
	}
	return false, nil
}

// expandNodes asks every node holding v (a claim of it in use or
// releasing there) to expand it to capacity, at once, and answers one
// result per node, sorted by node ID. staging is whether a node where no
// claim of v is in use or releasing has one reserved or ready: it is
// still staging the volume, and not asked.
func (e *volumesEndpoint) expandNodes(ctx context.Context, v *pb.Volume, capacity, limit int64, secrets map[string]string) (_ []*pb.VolumeNodeExpansion, staging bool, _ error) {
	claims, err := e.s.State().ClaimsByVolume(nil, v.GetId())
	if err != nil {
		return nil, false, err
	}
	held, stagingOn := map[string]*pb.Claim{}, map[string]bool{}
	for _, c := range claims {
		switch c.GetState() {
		case pb.ClaimState_CLAIM_STATE_IN_USE, pb.ClaimState_CLAIM_STATE_RELEASING:
			if _, ok := held[c.GetNodeId()]; !ok {
				held[c.GetNodeId()] = c
			}
		case pb.ClaimState_CLAIM_STATE_RESERVED, pb.ClaimState_CLAIM_STATE_READY:
			stagingOn[c.GetNodeId()] = true
		}
	}
	for nodeID := range stagingOn {
		if _, ok := held[nodeID]; !ok {
			staging = true
		}
	}
	if len(held) > 0 && e.nodes == nil {
		return nil, false, fmt.Errorf("expanding volume %q (csi plugin %q) on its nodes: %w", v.GetId(), v.GetPluginId(), ErrNoNodeCalls)
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
			switch {
			case notHeld(err):
				// Its teardown finished since the claims were read: nothing
				// to expand there; its next stage makes a pending expansion.
				r.NotHeld = true
			case err != nil:
				r.Error = err.Error()
				e.s.Logger.Warn("node expansion failed", "volume_id", v.GetId(), "plugin_id", v.GetPluginId(), "node_id", nodeID, "error", err)
			default:
				r.CapacityBytes = resp.GetCapacityBytes()
			}
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b *pb.VolumeNodeExpansion) int { return strings.Compare(a.GetNodeId(), b.GetNodeId()) })
	return out, staging, nil
}

// notHeld is whether err is the node's answer that it no longer holds the
// volume staged or published (volumemanager.ErrNotHeld, whose code and
// text the node's answer keeps).
func notHeld(err error) bool {
	return errcode.Code(err) == errcode.Code(volumemanager.ErrNotHeld) && strings.Contains(err.Error(), volumemanager.ErrNotHeld.Error())
}
