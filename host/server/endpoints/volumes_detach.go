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
	NodeDetachVolume(ctx context.Context, nodeID, volumeID string, users []*pb.CSINodeDetachUser) (*pb.CSINodeDetachResponse, error)
}

var (
	// ErrVolumeInUseOnNode is returned by Volumes.Detach while the volume
	// is used on the node: a claim of an alloc its client has not reported
	// ended (complete, failed or lost) — one the servers stopped whose
	// tasks are still being killed is "stopping" — or an operator's claim
	// not released. The message names the volume, the node and each
	// claimant.
	ErrVolumeInUseOnNode = errcode.New(codes.FailedPrecondition, "the volume is in use on the node")
	// ErrNoNodeCalls is returned by Volumes.Detach and Volumes.Expand on a
	// server built without a way to call nodes (a test's, or a tool's).
	ErrNoNodeCalls = errcode.New(codes.Unimplemented, "this server makes no node calls")
)

// detachUpdateTries bounds the proposals of the node-detached transitions:
// one refused because a claim moved meanwhile (its client's own report
// arrived first) is read and proposed again.
const detachUpdateTries = 3

// Detach takes a volume off a node whose allocs are gone (`berth volume
// detach`). Refused with ErrVolumeInUseOnNode while an alloc there that its
// client has not reported ended (complete, failed or lost), or an
// operator's claim not released, claims it: an alloc the servers stopped
// may still have tasks running until its kill_timeout. Otherwise the node
// is sent the claims checked — those releasing on the node, with their
// users (allocs, operators' claims) — and tears down exactly those users'
// uses (NodeDetachVolume, through the client proxy), queueing their
// node-detached reports as an alloc's teardown does, and answers per user.
// The claims whose user the node confirmed (torn down, or holding nothing
// there and no publish under way) are moved to node-detached through raft
// (ClaimUpdate, as the node's own report), and the attach reconciler's
// ControllerUnpublishVolume frees them, or the apply does when no
// controller publish is held. A claim the node failed to take down stays
// releasing; the response's node results say why.
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
		return nil, fmt.Errorf("detaching volume %q from node %s: %w", volumeID, nodeID, ErrNoNodeCalls)
	}
	users := make([]*pb.CSINodeDetachUser, 0, len(releasing))
	for _, c := range releasing {
		u := &pb.CSINodeDetachUser{ClaimId: c.GetId()}
		if !c.GetOperator() {
			u.AllocId = c.GetAllocId()
		}
		users = append(users, u)
	}
	// The proxy's errors name the volume and the node; the node's own
	// answers already do, and are passed on as they are.
	done, err := e.detacher.NodeDetachVolume(ctx, nodeID, volumeID, users)
	if err != nil {
		return nil, err
	}
	confirmed := map[string]bool{}
	for _, r := range done.GetResults() {
		switch r.GetOutcome() {
		case pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_DONE, pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_NOT_HELD:
			confirmed[r.GetUser().GetClaimId()] = true
		default:
			e.s.Logger.Warn("volume detach: the node could not take a use down", "volume_id", volumeID, "node_id", nodeID,
				"claim_id", r.GetUser().GetClaimId(), "alloc_id", r.GetUser().GetAllocId(), "error", r.GetError())
		}
	}
	e.s.Logger.Info("volume detached on its node", "volume_id", volumeID, "node_id", nodeID, "plugin_id", done.GetPluginId(),
		"allocs", done.GetAllocIds(), "claims", done.GetClaimIds(), "unstaged", done.GetUnstaged(), "confirmed", len(confirmed), "checked", len(users))
	idx, err := e.detachClaims(ctx, volumeID, nodeID, confirmed)
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
// returns its claims there that are releasing.
func (e *volumesEndpoint) detachable(volumeID, nodeID string) ([]*pb.Claim, error) {
	st := e.s.State()
	claims, err := st.ClaimsByVolume(nil, volumeID)
	if err != nil {
		return nil, err
	}
	var releasing []*pb.Claim
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
			// Terminal as its client reports it: one the servers stopped
			// may still have tasks running (kill_timeout).
			switch {
			case a == nil || rules.AllocClientTerminal(a):
			case rules.AllocServerTerminal(a):
				busy = append(busy, fmt.Sprintf("alloc %s (stopping: %s on its client, claim %s)", a.GetId(), pb.EnumWord(a.GetClientStatus()), pb.EnumWord(state)))
			default:
				busy = append(busy, fmt.Sprintf("alloc %s (%s, claim %s)", a.GetId(), pb.EnumWord(a.GetClientStatus()), pb.EnumWord(state)))
			}
		}
		if state == pb.ClaimState_CLAIM_STATE_RELEASING {
			releasing = append(releasing, c)
		}
	}
	if len(busy) > 0 {
		return nil, fmt.Errorf("detaching volume %q from node %s: %w: %s; stop it first", volumeID, nodeID, ErrVolumeInUseOnNode, strings.Join(busy, ", "))
	}
	return releasing, nil
}

// detachClaims moves the claims of ids (those the node confirmed) still
// releasing on the node to node-detached, as their node's report, and
// returns the index of the claims table after.
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
