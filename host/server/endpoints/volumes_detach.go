package endpoints

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// NodeDetacher asks a node to take a volume off
// (clientproxy.CSIForwarder).
type NodeDetacher interface {
	NodeDetachVolume(ctx context.Context, nodeID, volumeID string) (*pb.CSINodeDetachResponse, error)
}

var (
	// ErrVolumeInUseOnNode is returned by Volumes.Detach while the volume
	// is used on the node: a claim of an alloc that is not terminal, or an
	// operator's claim not released. The message names the volume, the
	// node and each claimant.
	ErrVolumeInUseOnNode = errcode.New(codes.FailedPrecondition, "the volume is in use on the node")
	// ErrNoNodeDetacher is returned by Volumes.Detach on a server built
	// without node calls.
	ErrNoNodeDetacher = errcode.New(codes.Unimplemented, "this server makes no node calls")
)

// detachUpdateTries bounds the proposals of the node-detached transitions:
// one refused because a claim moved meanwhile (its client's own report
// arrived first) is read and proposed again.
const detachUpdateTries = 3

// Detach takes a volume off a node whose allocs are gone (`berth volume
// detach`). Refused with ErrVolumeInUseOnNode while an alloc there that is
// not terminal, or an operator's claim not released, claims it. Otherwise
// the node unpublishes and unstages what is left of the volume
// (NodeDetachVolume, through the client proxy), queueing the node-detached
// reports of the uses it took down as an alloc's teardown does; then the
// claims on the node that were releasing when the detach was checked are
// moved to node-detached through raft (ClaimUpdate, as the node's own
// report: the node said it holds nothing of them), and the attach
// reconciler's ControllerUnpublishVolume frees them, or the apply does
// when no controller publish is held.
func (e *volumesEndpoint) Detach(ctx context.Context, req *pb.VolumeDetachRequest) (*pb.VolumeDetachResponse, error) {
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	v, err := e.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	volumeID, nodeID := v.GetId(), req.GetNodeId()
	if nodeID == "" {
		return nil, fmt.Errorf("detaching volume %q: %w: node_id is required", volumeID, volumespec.ErrInvalidVolume)
	}
	st := e.s.State()
	n, err := st.NodeByID(nil, nodeID)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("detaching volume %q from node %s: %w", volumeID, nodeID, fsm.ErrNodeNotFound)
	}
	releasing, err := e.detachable(volumeID, nodeID)
	if err != nil {
		return nil, err
	}
	if e.detacher == nil {
		return nil, fmt.Errorf("detaching volume %q from node %s: %w", volumeID, nodeID, ErrNoNodeDetacher)
	}
	done, err := e.detacher.NodeDetachVolume(ctx, nodeID, volumeID)
	if err != nil {
		return nil, fmt.Errorf("detaching volume %q from node %s: %w", volumeID, nodeID, err)
	}
	e.s.Logger.Info("volume detached on its node", "volume_id", volumeID, "node_id", nodeID, "plugin_id", done.GetPluginId(),
		"allocs", done.GetAllocIds(), "claims", done.GetClaimIds(), "unstaged", done.GetUnstaged())
	idx, err := e.detachClaims(ctx, volumeID, nodeID, releasing)
	if err != nil {
		return nil, err
	}
	resp := &pb.VolumeDetachResponse{Node: done, Meta: &pb.WriteMeta{Index: idx}}
	claims, err := e.s.State().ClaimsByVolume(nil, volumeID)
	if err != nil {
		return nil, err
	}
	for _, c := range claims {
		if c.GetNodeId() == nodeID {
			resp.Claims = append(resp.Claims, c)
		}
	}
	return resp, nil
}

// detachable checks no claim holds the volume in use on the node and
// returns the IDs of its claims there that are releasing.
func (e *volumesEndpoint) detachable(volumeID, nodeID string) (map[string]bool, error) {
	st := e.s.State()
	claims, err := st.ClaimsByVolume(nil, volumeID)
	if err != nil {
		return nil, err
	}
	releasing := map[string]bool{}
	var busy []string
	for _, c := range claims {
		if c.GetNodeId() != nodeID {
			continue
		}
		state := c.GetState()
		released := state == pb.ClaimState_CLAIM_STATE_RELEASING || state == pb.ClaimState_CLAIM_STATE_NODE_DETACHED
		if c.GetOperator() || c.GetAllocId() == "" {
			if !released {
				busy = append(busy, fmt.Sprintf("operator claim %q (%s)", c.GetId(), pb.EnumWord(state)))
			}
		} else {
			a, err := st.AllocByID(nil, c.GetAllocId())
			if err != nil {
				return nil, err
			}
			if a != nil && !rules.AllocTerminal(a) {
				busy = append(busy, fmt.Sprintf("alloc %s (%s, claim %s)", a.GetId(), pb.EnumWord(a.GetClientStatus()), pb.EnumWord(state)))
			}
		}
		if state == pb.ClaimState_CLAIM_STATE_RELEASING {
			releasing[c.GetId()] = true
		}
	}
	if len(busy) > 0 {
		return nil, fmt.Errorf("detaching volume %q from node %s: %w: %s; stop it first", volumeID, nodeID, ErrVolumeInUseOnNode, strings.Join(busy, ", "))
	}
	return releasing, nil
}

// detachClaims moves the claims of ids still releasing on the node to
// node-detached, as their node's report, and returns the index of the
// claims table after.
func (e *volumesEndpoint) detachClaims(ctx context.Context, volumeID, nodeID string, ids map[string]bool) (uint64, error) {
	var lastErr error
	for range detachUpdateTries {
		claims, err := e.s.State().ClaimsByVolume(nil, volumeID)
		if err != nil {
			return 0, err
		}
		var ts []*pb.ClaimTransition
		for _, c := range claims {
			if ids[c.GetId()] && c.GetNodeId() == nodeID && c.GetState() == pb.ClaimState_CLAIM_STATE_RELEASING {
				ts = append(ts, &pb.ClaimTransition{ClaimId: c.GetId(), State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: nodeID})
			}
		}
		if len(ts) == 0 {
			return e.s.State().Index(fsm.TableClaims)
		}
		idx, err := e.s.Apply(ctx, fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: ts, UpdatedAt: e.s.Clock.Now().UnixNano()})
		if err == nil {
			return idx, nil
		}
		if !errors.Is(err, fsm.ErrClaimTransition) && !errors.Is(err, fsm.ErrClaimNotFound) {
			return 0, fmt.Errorf("detaching volume %q from node %s: recording its claims node-detached: %w", volumeID, nodeID, err)
		}
		lastErr = err
	}
	return 0, fmt.Errorf("detaching volume %q from node %s: recording its claims node-detached: %w", volumeID, nodeID, lastErr)
}
