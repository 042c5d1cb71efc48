package fsm

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// Claims (DESIGN "Claim and attachment states"):
//
//	reserved ──(ready: no controller needed, or attachment attached)──> ready
//	ready ──(client published)──> in-use
//	reserved|ready|in-use ──(claimant terminal)──> releasing
//	releasing ──(client unpublished, or node down/fenced, forced)──> node-detached
//	node-detached ──(no attachment left)──> freed (removed)
//
// A claim is reserved by PlanApply (an alloc's) or OperatorClaim, in the
// same apply that checks it fits (rules.CheckClaim) against every claim the
// volume holds, those written earlier in the raft batch included. Where
// the apply can decide a step itself it takes it at once, so no leader
// loop has to notice: a claim that needs no controller publish, or whose
// node's attachment is already attached, is reserved straight to ready;
// one that does creates the attachment (attaching) and waits reserved;
// AttachmentUpdate to attached readies the node's reserved claims; an
// alloc that becomes terminal (PlanApply stop, AllocClientUpdate, GC)
// moves its claims to releasing; fencing a node moves its releasing claims
// to node-detached; a node-detached claim with no attachment to wait for is
// freed at once; the last live claim of a node leaving moves the
// attachment to detaching; removing the attachment frees the node-detached
// claims. ClaimUpdate carries the steps only others can know (the client
// published or unpublished, the leader forced a detach) and error records.
//
// Every move is monotonic and idempotent: a move to the claim's current
// state changes nothing (or records a newer failed try), a move to an
// earlier state, or one that skips a step, is refused with
// ErrClaimTransition, and a move to freed of a claim that is gone is done.

// reservation is a claim a command wants to reserve, checked and ready to
// store.
type reservation struct {
	claim  *pb.Claim
	volume *pb.Volume
}

// checkReservation checks claim c against its volume and the claims the
// volume holds plus pending (claims of the same command not yet written),
// returning the reservation or why it cannot be made (wrapping
// ErrVolumeNotFound, ErrNoFreeClaim, ErrClaimCapability,
// ErrAttachmentTransition or ErrMaxVolumes).
func checkReservation(tx *writeTxn, c *pb.Claim, pending []*pb.Claim) (*reservation, error) {
	v, err := volumesTable.first(tx, nil, c.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if v == nil && rules.HostClaim(c) {
		if v, err = hostClaimVolume(tx, c.GetVolumeId()); err != nil {
			return nil, err
		}
	}
	if v == nil {
		return nil, fmt.Errorf("volume %q, %s on node %q: %w", c.GetVolumeId(), rules.Claimant(c), c.GetNodeId(), ErrVolumeNotFound)
	}
	held, err := heldClaims(tx, c)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		if p.GetVolumeId() == c.GetVolumeId() {
			held = append(held, p)
		}
	}
	if err := rules.CheckClaim(v, held, c); err != nil {
		return nil, err
	}
	a, err := attachmentsTable.first(tx, nil, c.GetVolumeId(), c.GetNodeId())
	if err != nil {
		return nil, err
	}
	if a.GetState() == pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		// A new claim cannot share an attachment that is being unpublished,
		// and there is one attachment per (volume, node): wait for it to go.
		return nil, fmt.Errorf("volume %q, %s on node %q: %w: the volume is detaching from the node",
			c.GetVolumeId(), rules.Claimant(c), c.GetNodeId(), ErrAttachmentTransition)
	}
	if err := checkMaxVolumes(tx, v, c, pending); err != nil {
		return nil, err
	}
	return &reservation{claim: c, volume: v}, nil
}

// checkMaxVolumes refuses claim c (ErrMaxVolumes) when its node's instance
// of v's plugin reports max_volumes and the node already holds claims on
// that many other volumes of the plugin: the stored claims, which through
// the batch's transaction include those written earlier in the raft batch,
// plus pending. The scheduler and the operator claim endpoint check it
// from their snapshots; two of them racing (concurrent workers, an
// operator claim beside a plan) could each see room for one more, so the
// apply decides. A claim on a volume the node holds already adds none.
// It costs one node read, and with a limit, a read of the node's claims
// and of each other volume they name.
func checkMaxVolumes(tx *writeTxn, v *pb.Volume, c *pb.Claim, pending []*pb.Claim) error {
	node, err := nodesTable.first(tx, nil, c.GetNodeId())
	if err != nil || node == nil {
		return err
	}
	limit := node.GetCsiNodePlugins()[v.GetPluginId()].GetNodeInfo().GetMaxVolumes()
	if limit <= 0 {
		return nil
	}
	claims, err := claimsByNode.list(tx, nil, c.GetNodeId())
	if err != nil {
		return err
	}
	for _, p := range pending {
		if p.GetNodeId() == c.GetNodeId() {
			claims = append(claims, p)
		}
	}
	plugin := map[string]string{v.GetId(): v.GetPluginId()} // volume -> plugin
	var held []string
	for _, h := range claims {
		id := h.GetVolumeId()
		if id == v.GetId() {
			return nil
		}
		if _, ok := plugin[id]; ok {
			continue
		}
		other, err := volumesTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		plugin[id] = other.GetPluginId()
		if plugin[id] == v.GetPluginId() {
			held = append(held, id)
		}
	}
	if int64(len(held)) < limit {
		return nil
	}
	slices.Sort(held)
	return fmt.Errorf("volume %q, %s on node %q: %w: node plugin %q takes at most %d volumes and the node holds claims on %s",
		c.GetVolumeId(), rules.Claimant(c), c.GetNodeId(), ErrMaxVolumes, v.GetPluginId(), limit, quotedList(held))
}

// quotedList is ids quoted and comma separated, the first five and a
// count of the rest.
func quotedList(ids []string) string {
	const show = 5
	var b strings.Builder
	for i, id := range ids {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(ids)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", id)
	}
	return b.String()
}

// heldClaims returns the claims c's volume holds that rules.CheckClaim must see
// to judge c. Every claim a volume holds has the same access mode:
// rules.CheckClaim refuses a claim whose mode differs from a held one, and no
// transition changes a claim's mode. So when c's mode limits neither the
// nodes, nor the claims, nor (for a write claim) the writers, as
// multi-node-multi-writer does, the first held claim other than c answers
// for all of them: a placement on a volume a thousand allocs share reads
// one claim, not a thousand. Any other mode reads them all (a handful at
// most: such modes allow one node or one writer).
func heldClaims(tx *writeTxn, c *pb.Claim) ([]*pb.Claim, error) {
	limits, ok := rules.AccessModeLimitsOf(c.GetAccessMode())
	write := c.GetMode() == pb.ClaimMode_CLAIM_MODE_WRITE
	if !ok || !limits.MultiNode || limits.MaxClaims > 0 || (write && limits.MaxWriters > 0) {
		return claimsByVolume.list(tx, nil, c.GetVolumeId())
	}
	var held []*pb.Claim
	err := claimsByVolume.each(tx.readTxn(), nil, []string{c.GetVolumeId()}, func(h *pb.Claim) error {
		if h.GetId() == c.GetId() {
			return nil // CheckClaim skips c itself
		}
		held = append(held, h)
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, err
	}
	return held, nil
}

// store writes a checked reservation: the claim ready when the node's
// attachment is attached, or when its volume needs no controller publish
// and the attachment is not detaching; otherwise reserved, creating the
// attachment (attaching) if there is none.
func (r *reservation) store(tx *writeTxn, at int64) error {
	c := r.claim
	c.State = pb.ClaimState_CLAIM_STATE_READY
	c.LastError, c.Attempts, c.NextRetryAt = nil, 0, 0
	c.CreateIndex, c.ModifyIndex = tx.index, tx.index
	c.CreatedAt, c.ModifiedAt = at, at
	needs, err := needsController(tx, r.volume)
	if err != nil {
		return err
	}
	if err := markStateSince(tx, nil, c, at); err != nil {
		return err
	}
	// Read again: an earlier claim of the same command (two allocs of a
	// plan on one node) may have created it since the check.
	att, err := attachmentsTable.first(tx, nil, c.GetVolumeId(), c.GetNodeId())
	if err != nil {
		return err
	}
	switch {
	case att.GetState() == pb.AttachmentState_ATTACHMENT_STATE_ATTACHED:
	case att.GetState() == pb.AttachmentState_ATTACHMENT_STATE_ATTACHING && !needs:
		// A publish the plugin no longer requires (its controllers
		// stopped publishing): the claim does not wait for it.
	case att != nil:
		c.State = pb.ClaimState_CLAIM_STATE_RESERVED
	case needs:
		c.State = pb.ClaimState_CLAIM_STATE_RESERVED
		a := &pb.Attachment{
			VolumeId: c.GetVolumeId(), NodeId: c.GetNodeId(), PluginId: r.volume.GetPluginId(),
			State:     pb.AttachmentState_ATTACHMENT_STATE_ATTACHING,
			CreatedAt: at, ModifiedAt: at, CreateIndex: tx.index, ModifyIndex: tx.index,
		}
		if err := attachmentsTable.insert(tx, a); err != nil {
			return err
		}
	}
	return claimsTable.insert(tx, c)
}

// needsController reports whether a claim on v needs a controller publish
// first: the plugin's row says controller_required (the volume's mirror
// when the plugin has no row).
func needsController(tx *writeTxn, v *pb.Volume) (bool, error) {
	p, err := csiPluginsTable.first(tx, nil, v.GetPluginId())
	if err != nil {
		return false, err
	}
	if p == nil {
		return v.GetControllerRequired(), nil
	}
	return p.GetControllerRequired(), nil
}

// checkNewClaim refuses a claim no reservation may store: no ID, volume
// or node, an operator flag that does not match the claimant, an ID or
// an (alloc, volume) pair already taken by another claim.
func checkNewClaim(tx *writeTxn, c *pb.Claim) (existing *pb.Claim, err error) {
	switch {
	case c.GetId() == "":
		return nil, fmt.Errorf("%w: a claim on volume %q has no ID", ErrInvalidCommand, c.GetVolumeId())
	case c.GetVolumeId() == "":
		return nil, fmt.Errorf("%w: claim %q names no volume", ErrInvalidCommand, c.GetId())
	case c.GetNodeId() == "":
		return nil, fmt.Errorf("%w: claim %q on volume %q names no node", ErrInvalidCommand, c.GetId(), c.GetVolumeId())
	case c.GetOperator() == (c.GetAllocId() != ""):
		return nil, fmt.Errorf("%w: claim %q on volume %q: an alloc's claim has alloc_id, an operator's has none", ErrInvalidCommand, c.GetId(), c.GetVolumeId())
	}
	existing, err = claimsTable.first(tx, nil, c.GetId())
	if err != nil {
		return nil, err
	}
	if existing != nil && (existing.GetVolumeId() != c.GetVolumeId() || existing.GetAllocId() != c.GetAllocId() || existing.GetNodeId() != c.GetNodeId()) {
		return nil, fmt.Errorf("%w: claim %q is already %s", ErrInvalidCommand, c.GetId(), rules.DescribeClaim(existing))
	}
	if existing == nil && c.GetAllocId() != "" {
		other, err := claimsByAlloc.first(tx, nil, c.GetAllocId(), c.GetVolumeId())
		if err != nil {
			return nil, err
		}
		if other != nil {
			// The plan re-reserving an alloc's claim (an in-place update)
			// keeps the claim it has.
			return other, nil
		}
	}
	return existing, nil
}

// applyOperatorClaim reserves an operator's claim (`berth volume claim`).
// The node must be registered (ErrNodeNotFound), ready and not fenced
// (ErrNodeUnavailable); the claim must fit (rules.CheckClaim). A claim whose ID
// is stored already is no error: the command was applied before.
func applyOperatorClaim(tx *writeTxn, cmd *pb.OperatorClaimCommand) error {
	c := cmd.GetClaim()
	if c == nil {
		return fmt.Errorf("%w: no claim", ErrInvalidCommand)
	}
	c.Operator = true
	existing, err := checkNewClaim(tx, c)
	if err != nil || existing != nil {
		return err
	}
	node, err := nodesTable.first(tx, nil, c.GetNodeId())
	if err != nil {
		return err
	}
	switch {
	case node == nil:
		return fmt.Errorf("operator claim %q on volume %q: node %q: %w", c.GetId(), c.GetVolumeId(), c.GetNodeId(), ErrNodeNotFound)
	case node.GetStatus() != pb.NodeStatus_NODE_STATUS_READY || node.GetFenced():
		return fmt.Errorf("operator claim %q on volume %q: node %q is %s: %w", c.GetId(), c.GetVolumeId(), c.GetNodeId(),
			nodeAvailabilityWord(node), ErrNodeUnavailable)
	}
	r, err := checkReservation(tx, c, nil)
	if err != nil {
		return err
	}
	return r.store(tx, cmd.GetCreatedAt())
}

func nodeAvailabilityWord(n *pb.Node) string {
	if n.GetFenced() {
		return "fenced"
	}
	return nodeStatusWord(n.GetStatus())
}

// applyOperatorClaimRelease moves an operator's claim to releasing, as an
// alloc's claim moves when its alloc stops. A claim already releasing or
// further on, or gone, is no error (the release was applied before). An
// alloc's claim is refused (ErrNotOperatorClaim).
func applyOperatorClaimRelease(tx *writeTxn, cmd *pb.OperatorClaimReleaseCommand) error {
	id := cmd.GetClaimId()
	if id == "" {
		return fmt.Errorf("%w: no claim ID", ErrInvalidCommand)
	}
	c, err := claimsTable.first(tx, nil, id)
	if err != nil || c == nil {
		return err
	}
	if !c.GetOperator() {
		return fmt.Errorf("claim %q on volume %q belongs to alloc %q, released when it stops: %w", id, c.GetVolumeId(), c.GetAllocId(), ErrNotOperatorClaim)
	}
	if c.GetState() >= pb.ClaimState_CLAIM_STATE_RELEASING {
		return nil
	}
	return writeClaimState(tx, c, pb.ClaimState_CLAIM_STATE_RELEASING, cmd.GetUpdatedAt())
}

// writeClaimState stores c moved to state (a new step: its error record
// is cleared).
func writeClaimState(tx *writeTxn, c *pb.Claim, state pb.ClaimState, at int64) error {
	n := proto.Clone(c).(*pb.Claim)
	n.State = state
	n.LastError, n.Attempts, n.NextRetryAt = nil, 0, 0
	n.ModifiedAt, n.ModifyIndex = at, tx.index
	if err := markStateSince(tx, c, n, at); err != nil {
		return err
	}
	return claimsTable.insert(tx, n)
}

// claimsAllocsChanged moves to releasing the claims of the allocs given
// that are now terminal or gone, in the apply that made them so: the
// reaper finds them by state, with no scan. With no claim stored it costs
// one read. clientStopped holds the allocs whose client reported them
// stopped in this apply (nil: none): only those, and allocs that are gone,
// free their host volume claims.
func claimsAllocsChanged(tx *writeTxn, allocIDs []string, at int64, clientStopped map[string]bool) error {
	if len(allocIDs) == 0 {
		return nil
	}
	if some, err := claimsTable.hasRows(tx); err != nil || !some {
		return err
	}
	for _, id := range allocIDs {
		claims, err := claimsByAlloc.list(tx, nil, id)
		if err != nil {
			return err
		}
		if len(claims) == 0 {
			continue
		}
		a, err := allocsTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if a != nil && !rules.AllocTerminal(a) {
			continue
		}
		for _, c := range claims {
			if host, err := releaseHostClaim(tx, c, a, clientStopped[id], at); err != nil || host {
				if err != nil {
					return err
				}
				continue
			}
			if c.GetState() >= pb.ClaimState_CLAIM_STATE_RELEASING {
				continue
			}
			if err := writeClaimState(tx, c, pb.ClaimState_CLAIM_STATE_RELEASING, at); err != nil {
				return err
			}
		}
	}
	return nil
}
