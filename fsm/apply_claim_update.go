package fsm

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// applyClaimUpdate applies claim transitions, all or none: each is checked
// against the claim as the transitions before it in the command left it,
// and nothing is written until all pass. The moves (see apply_claim.go):
//
//   - to the claim's current state: records error when the transition's
//     attempts is above the stored one (a try recorded already, proposed
//     again, changes nothing); otherwise nothing.
//   - to an earlier state: ErrClaimTransition.
//   - ready, from reserved: the volume needs no controller publish and the
//     node has no attachment, or the node's attachment is attached.
//   - in-use, from ready.
//   - releasing, from reserved, ready or in-use.
//   - node-detached, from releasing, reported by the claim's node
//     (node_id) or forced (force: the leader decided the node is down past
//     force_detach_after), which the state machine allows only when the
//     node is down, fenced or gone; from reserved, ready or in-use when the
//     node is fenced. When the node has no attachment of the volume (no
//     controller publish was needed) the claim is freed at once.
//   - freed, from node-detached, once the node has no attachment of the
//     volume: the claim is removed. A claim that is gone is freed already,
//     and a move of it to node-detached is done too. A claim the command
//     detaches from a node where the volume keeps live claims is freed at
//     once (freeBesideLive).
//
// A move to in-use with node_expanded_bytes (the node expanded the volume
// after staging or publishing it) records that size as the volume's
// capacity when it is larger, and clears node_expansion_pending_bytes
// when it covers it (recordNodeExpansions).
//
// A transition naming a node (a client's report) must name the claim's
// (ErrClaimNodeMismatch); an unknown claim is ErrClaimNotFound. After the
// writes, every (volume, node) whose last live claim left moves its
// attachment to detaching. The apply answers a *pb.ClaimUpdateResult: how
// many transitions moved a claim (the reaper counts what it forced).
func applyClaimUpdate(tx *writeTxn, cmd *pb.ClaimUpdateCommand) error {
	if len(cmd.GetTransitions()) == 0 {
		return fmt.Errorf("%w: no claim transitions", ErrInvalidCommand)
	}
	// next holds each claim as the transitions so far left it (nil: freed).
	next := map[string]*pb.Claim{}
	var order []string
	res := &pb.ClaimUpdateResult{}
	for i, t := range cmd.GetTransitions() {
		id := t.GetClaimId()
		if id == "" {
			return fmt.Errorf("%w: claim transition %d of %d names no claim", ErrInvalidCommand, i+1, len(cmd.GetTransitions()))
		}
		cur, seen := next[id]
		if !seen {
			stored, err := claimsTable.first(tx, nil, id)
			if err != nil {
				return err
			}
			cur = stored
		}
		moved, err := claimTransition(tx, cur, t, cmd.GetUpdatedAt())
		if err != nil {
			return err
		}
		if moved == cur {
			continue
		}
		if moved == nil || moved.GetState() != cur.GetState() {
			res.Moved++
		}
		if !seen {
			order = append(order, id)
		}
		next[id] = moved
	}
	if err := freeBesideLive(tx, next, order); err != nil {
		return err
	}
	var touched []*pb.Claim
	for _, id := range order {
		c := next[id]
		if c == nil {
			stored, err := claimsTable.first(tx, nil, id)
			if err != nil {
				return err
			}
			touched = append(touched, stored)
			if err := claimsTable.delete(tx, stored); err != nil {
				return err
			}
			continue
		}
		c.ModifyIndex = tx.index
		touched = append(touched, c)
		if err := claimsTable.insert(tx, c); err != nil {
			return err
		}
	}
	if err := recordNodeExpansions(tx, cmd, next); err != nil {
		return err
	}
	if err := detachIfUnclaimed(tx, touched, cmd.GetUpdatedAt()); err != nil {
		return err
	}
	tx.result = res
	return nil
}

// claimTransition returns claim c after transition t: c itself when
// nothing changes, nil when it is freed, a changed copy otherwise.
func claimTransition(tx *writeTxn, c *pb.Claim, t *pb.ClaimTransition, at int64) (*pb.Claim, error) {
	target := t.GetState()
	if c == nil {
		// A claim that is gone was freed: a move towards its end (a
		// client's detach report sent again) is done.
		if target == pb.ClaimState_CLAIM_STATE_NODE_DETACHED || target == pb.ClaimState_CLAIM_STATE_FREED {
			return nil, nil
		}
		return nil, fmt.Errorf("claim %q to %s: %w", t.GetClaimId(), pb.EnumWord(target), ErrClaimNotFound)
	}
	who := fmt.Sprintf("claim %q of %s on volume %q, node %q", c.GetId(), rules.Claimant(c), c.GetVolumeId(), c.GetNodeId())
	if n := t.GetNodeId(); n != "" && n != c.GetNodeId() {
		return nil, fmt.Errorf("%s: node %q reported it: %w", who, n, ErrClaimNodeMismatch)
	}
	cur := c.GetState()
	refuse := func(why string) error {
		return fmt.Errorf("%s: %w: %s to %s: %s", who, ErrClaimTransition, pb.EnumWord(cur), pb.EnumWord(target), why)
	}
	switch {
	case target == pb.ClaimState_CLAIM_STATE_UNSPECIFIED:
		return nil, fmt.Errorf("%w: %s: no target state", ErrInvalidCommand, who)
	case target == cur:
		if t.GetError() == nil || t.GetAttempts() <= c.GetAttempts() {
			return c, nil
		}
		n := proto.Clone(c).(*pb.Claim)
		n.LastError, n.Attempts, n.NextRetryAt, n.ModifiedAt = t.GetError(), t.GetAttempts(), t.GetNextRetryAt(), at
		return n, nil
	case target < cur:
		return nil, refuse("claims never move back")
	}
	switch target {
	case pb.ClaimState_CLAIM_STATE_READY:
		if cur != pb.ClaimState_CLAIM_STATE_RESERVED {
			return nil, refuse("only a reserved claim becomes ready")
		}
		if ok, why, err := claimMayBeReady(tx, c); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			return nil, refuse(why)
		}
	case pb.ClaimState_CLAIM_STATE_IN_USE:
		if cur != pb.ClaimState_CLAIM_STATE_READY {
			return nil, refuse("only a ready claim is published")
		}
	case pb.ClaimState_CLAIM_STATE_RELEASING:
	case pb.ClaimState_CLAIM_STATE_NODE_DETACHED:
		node, err := nodesTable.first(tx, nil, c.GetNodeId())
		if err != nil {
			return nil, err
		}
		switch {
		case node.GetFenced():
			// The operator says the node is off: nothing is published there.
		case cur != pb.ClaimState_CLAIM_STATE_RELEASING:
			return nil, refuse("a claim is released before it is detached, unless its node is fenced")
		case t.GetForce() && node != nil && node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY:
			return nil, refuse(fmt.Sprintf("node %q is ready: only its client detaches its claims", c.GetNodeId()))
		case !t.GetForce() && t.GetNodeId() == "":
			return nil, refuse("the claim's node reports it (node_id), or the leader forces it")
		}
		// With no attachment to remove, nothing is left to wait for: the
		// claim is freed in this apply (the volume's next claimant waits on
		// no reaper pass).
		a, err := attachmentsTable.first(tx, nil, c.GetVolumeId(), c.GetNodeId())
		if err != nil {
			return nil, err
		}
		if a == nil {
			return nil, nil
		}
	case pb.ClaimState_CLAIM_STATE_FREED:
		if cur != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			return nil, refuse("a claim is detached from its node before it is freed")
		}
		a, err := attachmentsTable.first(tx, nil, c.GetVolumeId(), c.GetNodeId())
		if err != nil {
			return nil, err
		}
		if a != nil {
			return nil, refuse(fmt.Sprintf("the volume's attachment to the node is %s: it is freed when the attachment is removed",
				pb.EnumWord(a.GetState())))
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: %s: target state %s", ErrInvalidCommand, who, pb.EnumWord(target))
	}
	n := proto.Clone(c).(*pb.Claim)
	n.State = target
	n.LastError, n.Attempts, n.NextRetryAt = nil, 0, 0
	n.ModifiedAt = at
	if err := markStateSince(tx, c, n, at); err != nil {
		return nil, err
	}
	return n, nil
}

// claimMayBeReady reports whether a reserved claim's node may stage its
// volume: the attachment is attached, or there is none and the volume
// needs no controller publish.
func claimMayBeReady(tx *writeTxn, c *pb.Claim) (bool, string, error) {
	a, err := attachmentsTable.first(tx, nil, c.GetVolumeId(), c.GetNodeId())
	if err != nil {
		return false, "", err
	}
	if a != nil {
		if a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
			return true, "", nil
		}
		return false, fmt.Sprintf("the volume's attachment to the node is %s", pb.EnumWord(a.GetState())), nil
	}
	v, err := volumesTable.first(tx, nil, c.GetVolumeId())
	if err != nil {
		return false, "", err
	}
	if v == nil {
		return true, "", nil
	}
	needs, err := needsController(tx, v)
	if err != nil || !needs {
		return !needs, "", err
	}
	return false, "the volume needs a controller publish and the node has no attachment", nil
}

// detachIfUnclaimed moves to detaching the attachment of each (volume,
// node) the claims given were on once no live claim (ClaimLive) is left
// there: the attach reconciler then unpublishes. An attachment still
// attaching goes too: its publish may have happened.
func detachIfUnclaimed(tx *writeTxn, claims []*pb.Claim, at int64) error {
	type volumeNode struct{ volume, node string }
	var done []volumeNode
	for _, c := range claims {
		k := volumeNode{c.GetVolumeId(), c.GetNodeId()}
		if slices.Contains(done, k) {
			continue
		}
		done = append(done, k)
		a, err := attachmentsTable.first(tx, nil, k.volume, k.node)
		if err != nil {
			return err
		}
		if a == nil || a.GetState() >= pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
			continue
		}
		live, err := liveClaimsOn(tx, k.volume, k.node)
		if err != nil {
			return err
		}
		if len(live) > 0 {
			continue
		}
		if err := writeAttachmentState(tx, a, pb.AttachmentState_ATTACHMENT_STATE_DETACHING, at); err != nil {
			return err
		}
	}
	return nil
}

// freeBesideLive frees (nil in next) each claim the command leaves
// node-detached on a node where its volume keeps a live claim once the
// command is applied. Such a claim waits for nothing: the node's
// attachment stays for the live claims, so no controller unpublish is
// coming for it, and kept, it would go on counting against the access
// mode's limits until they all leave (a stopped writer's claim beside a
// long-lived reader of a single-node-writer volume barred every next
// writer). A write claim of a multi-node mode limiting writers is kept:
// its node's attachment was published writable for it, and until that is
// unpublished, the one writer the mode allows must not be placed on
// another node.
func freeBesideLive(tx *writeTxn, next map[string]*pb.Claim, order []string) error {
	for _, id := range order {
		c := next[id]
		if c == nil || c.GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			continue
		}
		if c.GetMode() != pb.ClaimMode_CLAIM_MODE_READ {
			limits, ok := rules.AccessModeLimitsOf(c.GetAccessMode())
			if !ok || (limits.MultiNode && limits.MaxWriters > 0) {
				continue
			}
		}
		others, err := claimsByNode.list(tx, nil, c.GetNodeId(), c.GetVolumeId())
		if err != nil {
			return err
		}
		for _, o := range others {
			if o.GetId() == id {
				continue
			}
			if moved, ok := next[o.GetId()]; ok {
				o = moved
			}
			if o != nil && rules.ClaimLive(o) {
				next[id] = nil
				break
			}
		}
	}
	return nil
}

// liveClaimsOn lists the live claims of a volume on a node.
func liveClaimsOn(tx *writeTxn, volume, node string) ([]*pb.Claim, error) {
	claims, err := claimsByNode.list(tx, nil, node, volume)
	if err != nil {
		return nil, err
	}
	live := claims[:0:0]
	for _, c := range claims {
		if rules.ClaimLive(c) {
			live = append(live, c)
		}
	}
	return live, nil
}

// recordNodeExpansions applies the node_expanded_bytes of cmd's moves to
// in-use (next holds the claims as the command left them): the volume's
// capacity_bytes takes the largest when larger, and its pending node
// expansion is cleared when that covers it. A volume that changes nothing
// is not written.
func recordNodeExpansions(tx *writeTxn, cmd *pb.ClaimUpdateCommand, next map[string]*pb.Claim) error {
	expanded := map[string]int64{}
	var order []string
	for _, t := range cmd.GetTransitions() {
		c := next[t.GetClaimId()]
		if t.GetNodeExpandedBytes() <= 0 || t.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE || c.GetState() != pb.ClaimState_CLAIM_STATE_IN_USE {
			continue
		}
		id := c.GetVolumeId()
		if _, ok := expanded[id]; !ok {
			order = append(order, id)
		}
		expanded[id] = max(expanded[id], t.GetNodeExpandedBytes())
	}
	for _, id := range order {
		v, err := volumesTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if v == nil {
			continue
		}
		bytes := expanded[id]
		n := proto.CloneOf(v)
		n.CapacityBytes = max(v.GetCapacityBytes(), bytes)
		if p := v.GetNodeExpansionPendingBytes(); p > 0 && bytes >= p {
			n.NodeExpansionPendingBytes = 0
		}
		if proto.Equal(n, v) {
			continue
		}
		n.ModifiedAt, n.ModifyIndex = cmd.GetUpdatedAt(), tx.index
		if err := volumesTable.insert(tx, n); err != nil {
			return err
		}
	}
	return nil
}
