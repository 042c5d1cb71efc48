package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Attachments (DESIGN "Claim and attachment states"):
//
//	attaching ──ok──> attached ──(no live claims on this node)──> detaching ──ok──> (removed)
//	attaching|detaching ──error──> same state, last_error, attempts, next_retry
//
// One per (volume, node), created attaching by the reservation of the
// first claim on the node of a volume whose plugin requires a controller
// publish (apply_claim.go), moved to detaching by the apply in which the
// node's last live claim left (detachIfUnclaimed). The attach reconciler
// makes the controller calls and reports each outcome with
// AttachmentUpdate.

// applyAttachmentUpdate moves a (volume, node) attachment on or records a
// failed call:
//
//   - to its current state: records error when attempts is above the
//     stored one (and the controller node and CSI node ID used);
//     otherwise nothing.
//   - to an earlier state: ErrAttachmentTransition.
//   - attached, from attaching: stores the publish context, controller
//     node and CSI node ID, and readies the node's reserved claims of the
//     volume.
//   - detaching, from attaching or attached, when no live claim of the
//     volume is on the node (ErrAttachmentTransition naming them).
//   - detached, from detaching: removes the attachment and frees the
//     node-detached claims of the volume on the node. An attachment that
//     is gone is detached already.
//   - attaching, of an attachment that is gone, while live claims on the
//     node need one and the plugin requires the publish: created again (a
//     repair; the reconcile pass).
//   - attached, of an attachment that is gone, when its plugin's row is
//     derived_from_serving and no longer requires the publish: stored
//     detaching, so the reconciler undoes the publish (storeOrphanedPublish).
//
// An attachment that is not stored is ErrAttachmentNotFound otherwise.
func applyAttachmentUpdate(tx *writeTxn, cmd *pb.AttachmentUpdateCommand) error {
	volume, node, target := cmd.GetVolumeId(), cmd.GetNodeId(), cmd.GetState()
	if volume == "" || node == "" {
		return fmt.Errorf("%w: attachment update names no volume or no node (volume %q, node %q)", ErrInvalidCommand, volume, node)
	}
	if target == pb.AttachmentState_ATTACHMENT_STATE_UNSPECIFIED || target > pb.AttachmentState_ATTACHMENT_STATE_DETACHED {
		return fmt.Errorf("%w: attachment of volume %q to node %q: target state %s", ErrInvalidCommand, volume, node, pb.EnumWord(target))
	}
	who := fmt.Sprintf("attachment of volume %q to node %q", volume, node)
	a, err := attachmentsTable.first(tx, nil, volume, node)
	if err != nil {
		return err
	}
	at := cmd.GetUpdatedAt()
	if a == nil {
		switch target {
		case pb.AttachmentState_ATTACHMENT_STATE_DETACHED:
			return nil
		case pb.AttachmentState_ATTACHMENT_STATE_ATTACHING:
			return recreateAttachment(tx, volume, node, at)
		case pb.AttachmentState_ATTACHMENT_STATE_ATTACHED:
			return storeOrphanedPublish(tx, cmd, who)
		}
		return fmt.Errorf("%s to %s: %w", who, pb.EnumWord(target), ErrAttachmentNotFound)
	}
	cur := a.GetState()
	refuse := func(why string) error {
		return fmt.Errorf("%s: %w: %s to %s: %s", who, ErrAttachmentTransition, pb.EnumWord(cur), pb.EnumWord(target), why)
	}
	switch {
	case target == cur:
		if cmd.GetError() == nil || cmd.GetAttempts() <= a.GetAttempts() {
			return nil
		}
		n := proto.Clone(a).(*pb.Attachment)
		n.LastError, n.Attempts, n.NextRetryAt = cmd.GetError(), cmd.GetAttempts(), cmd.GetNextRetryAt()
		if c := cmd.GetControllerNodeId(); c != "" {
			n.ControllerNodeId = c
		}
		if c := cmd.GetCsiNodeId(); c != "" {
			// A failed publish may have happened: its unpublish names
			// the same node.
			n.CsiNodeId = c
		}
		n.ModifiedAt, n.ModifyIndex = at, tx.index
		return attachmentsTable.insert(tx, n)
	case target < cur:
		return refuse("attachments never move back")
	}
	switch target {
	case pb.AttachmentState_ATTACHMENT_STATE_ATTACHED:
		n := proto.Clone(a).(*pb.Attachment)
		n.State = target
		n.PublishContext = cmd.GetPublishContext()
		if c := cmd.GetControllerNodeId(); c != "" {
			n.ControllerNodeId = c
		}
		if c := cmd.GetCsiNodeId(); c != "" {
			n.CsiNodeId = c
		}
		n.LastError, n.Attempts, n.NextRetryAt = nil, 0, 0
		n.ModifiedAt, n.ModifyIndex = at, tx.index
		if err := attachmentsTable.insert(tx, n); err != nil {
			return err
		}
		return readyReservedClaims(tx, volume, node, at)
	case pb.AttachmentState_ATTACHMENT_STATE_DETACHING:
		live, err := liveClaimsOn(tx, volume, node)
		if err != nil {
			return err
		}
		if len(live) > 0 {
			return refuse("live claims on the node: " + describeClaims(live))
		}
		return writeAttachmentState(tx, a, target, at)
	default: // detached
		if cur != pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
			return refuse("an attachment is detaching (no live claims) before it is removed")
		}
		claims, err := claimsByNode.list(tx, nil, node, volume)
		if err != nil {
			return err
		}
		for _, c := range claims {
			if c.GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
				continue
			}
			if err := claimsTable.delete(tx, c); err != nil {
				return err
			}
		}
		return attachmentsTable.delete(tx, a)
	}
}

// recreateAttachment stores an attaching attachment for live claims that
// have none; without live claims needing one it is ErrAttachmentNotFound.
func recreateAttachment(tx *writeTxn, volume, node string, at int64) error {
	live, err := liveClaimsOn(tx, volume, node)
	if err != nil {
		return err
	}
	v, err := volumesTable.first(tx, nil, volume)
	if err != nil {
		return err
	}
	if len(live) == 0 || v == nil {
		return fmt.Errorf("attachment of volume %q to node %q to attaching: no live claim needs one: %w", volume, node, ErrAttachmentNotFound)
	}
	// The attachment may be gone because the plugin stopped requiring the
	// publish (skipControllerPublish): a failure recorded by a publish
	// that was in flight then must not bring it back, or the next claim
	// on the node would wait for a publish nothing serving makes.
	needs, err := needsController(tx, v)
	if err != nil {
		return err
	}
	if !needs {
		return fmt.Errorf("attachment of volume %q to node %q to attaching: plugin %q no longer requires a controller publish: %w", volume, node, v.GetPluginId(), ErrAttachmentNotFound)
	}
	return attachmentsTable.insert(tx, &pb.Attachment{
		VolumeId: volume, NodeId: node, PluginId: v.GetPluginId(), State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHING,
		CreatedAt: at, ModifiedAt: at, CreateIndex: tx.index, ModifyIndex: tx.index,
	})
}

// storeOrphanedPublish is the outcome of a publish that succeeded after
// its attachment was removed because the plugin stopped requiring the
// publish (skipControllerPublish: a task plugin replaced the storage
// adapter of its ID while the adapter's ControllerPublishVolume was in
// flight). The publish happened on the old backend, and nothing would
// undo it: the attachment is stored detaching, with the controller node
// and CSI node ID the publish used, and the attach reconciler unpublishes
// it through a controller that can, or removes it without a call when
// none of the plugin's controllers can (host/server/volumeloops/attach.go). The node's claims
// are not touched: they are ready without a publish.
//
// Only a row derived_from_serving can stop requiring the publish, and
// the servers that mark rows so apply this rule too; for any other row,
// or a plugin that requires the publish (the attachment went another way,
// detached and removed), it is ErrAttachmentNotFound as before, so
// servers of two versions apply the command alike.
func storeOrphanedPublish(tx *writeTxn, cmd *pb.AttachmentUpdateCommand, who string) error {
	notFound := func(why string) error {
		return fmt.Errorf("%s to attached: %w: %s", who, ErrAttachmentNotFound, why)
	}
	v, err := volumesTable.first(tx, nil, cmd.GetVolumeId())
	if err != nil {
		return err
	}
	if v == nil {
		return notFound("the volume is gone")
	}
	p, err := csiPluginsTable.first(tx, nil, v.GetPluginId())
	if err != nil {
		return err
	}
	if p == nil || !p.GetDerivedFromServing() || p.GetControllerRequired() {
		return notFound("no attachment waits for this publish")
	}
	at := cmd.GetUpdatedAt()
	return attachmentsTable.insert(tx, &pb.Attachment{
		VolumeId: cmd.GetVolumeId(), NodeId: cmd.GetNodeId(), PluginId: v.GetPluginId(), State: pb.AttachmentState_ATTACHMENT_STATE_DETACHING,
		ControllerNodeId: cmd.GetControllerNodeId(), CsiNodeId: cmd.GetCsiNodeId(), PublishContext: cmd.GetPublishContext(),
		CreatedAt: at, ModifiedAt: at, CreateIndex: tx.index, ModifyIndex: tx.index,
	})
}

// writeAttachmentState stores a moved to state (a new step: its error
// record is cleared).
func writeAttachmentState(tx *writeTxn, a *pb.Attachment, state pb.AttachmentState, at int64) error {
	n := proto.Clone(a).(*pb.Attachment)
	n.State = state
	n.LastError, n.Attempts, n.NextRetryAt = nil, 0, 0
	n.ModifiedAt, n.ModifyIndex = at, tx.index
	return attachmentsTable.insert(tx, n)
}

// readyReservedClaims moves the reserved claims of a volume on a node to
// ready: their attachment is attached.
func readyReservedClaims(tx *writeTxn, volume, node string, at int64) error {
	claims, err := claimsByNode.list(tx, nil, node, volume)
	if err != nil {
		return err
	}
	for _, c := range claims {
		if c.GetState() != pb.ClaimState_CLAIM_STATE_RESERVED {
			continue
		}
		if err := writeClaimState(tx, c, pb.ClaimState_CLAIM_STATE_READY, at); err != nil {
			return err
		}
	}
	return nil
}

// applyNodeFence records an operator's word that a node is off (fenced)
// or back. A fenced node takes no placements (rules.NodeSchedulable) and no
// operator claims; its releasing claims move to node-detached in the same
// apply (nothing can be published on a node that is off; freed at once
// where no attachment is left to remove), and its other
// claims may be moved there by ClaimUpdate once their claimants stop. The
// fence outlives re-registration: only an unfence lifts it. Fencing a
// fenced node (or unfencing one that is not) changes nothing.
func applyNodeFence(tx *writeTxn, cmd *pb.NodeFenceCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	node, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if node == nil {
		return fmt.Errorf("fence of node %q: %w", id, ErrNodeNotFound)
	}
	if node.GetFenced() == cmd.GetFenced() {
		return nil
	}
	n := proto.Clone(node).(*pb.Node)
	n.Fenced, n.FencedAt = cmd.GetFenced(), cmd.GetUpdatedAt()
	n.ModifyIndex = tx.index
	if err := nodesTable.insert(tx, n); err != nil {
		return err
	}
	if !cmd.GetFenced() {
		return nil
	}
	claims, err := claimsByNode.list(tx, nil, id)
	if err != nil {
		return err
	}
	var moved []*pb.Claim
	for _, c := range claims {
		if c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			continue
		}
		a, err := attachmentsTable.first(tx, nil, c.GetVolumeId(), id)
		if err != nil {
			return err
		}
		if a == nil {
			// Nothing to unpublish: freed, as ClaimUpdate frees it.
			if err := claimsTable.delete(tx, c); err != nil {
				return err
			}
			continue
		}
		if err := writeClaimState(tx, c, pb.ClaimState_CLAIM_STATE_NODE_DETACHED, cmd.GetUpdatedAt()); err != nil {
			return err
		}
		moved = append(moved, c)
	}
	return detachIfUnclaimed(tx, moved, cmd.GetUpdatedAt())
}
