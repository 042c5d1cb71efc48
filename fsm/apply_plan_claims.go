package fsm

import (
	"errors"
	"fmt"

	"berth.dev/berth/rpc/pb"
)

// A plan carries the volume claims its placements need (plan.claims), and
// PlanApply reserves them in the same apply, so a placement never starts
// without its claim and two placements never share a single-writer
// volume. Claims follow the plan's per-node semantics: a node whose claims
// do not all fit refuses its whole part (placements, updates and stops),
// and the reason names the volume, the alloc and the node. Each node's
// claims are checked against the claims the volume holds (those written
// earlier in the raft batch included: the index reads go through the
// batch's transaction) and against the claims of the nodes of the same
// plan that took their part before it, in plan order.
//
// Under the table rule only VolumeRegister creates volumes, so a plan
// carries claims only once every server knows the claims table: the
// scheduler claims volumes it read, and a plan claiming a volume that is
// not stored is refused on its node.

// planClaims checks the plan's claims and files each under its alloc's
// node. Refused as a whole (ErrInvalidCommand): a claim with no ID, no
// volume or no alloc, of an alloc the plan does not place or update, on
// another node than its alloc, an operator's, with no mode, twice in the
// plan, or whose ID another claim holds. A claim its alloc already holds
// (an in-place update re-sending it) is skipped.
func planClaims(tx *writeTxn, plan *pb.Plan, nodes []*planNode) error {
	if len(plan.GetClaims()) == 0 {
		return nil
	}
	allocNode := map[string]*planNode{}
	for _, pn := range nodes {
		for _, a := range pn.allocs {
			allocNode[a.GetId()] = pn
		}
	}
	seen := map[string]bool{}
	pairs := map[[2]string]bool{}
	for i, c := range plan.GetClaims() {
		pn := allocNode[c.GetAllocId()]
		switch {
		case c.GetAllocId() == "" || c.GetOperator():
			return fmt.Errorf("%w: claim %d of %d (%q) names no alloc", ErrInvalidCommand, i+1, len(plan.GetClaims()), c.GetId())
		case pn == nil:
			return fmt.Errorf("%w: claim %q on volume %q is for alloc %q, which the plan does not place", ErrInvalidCommand, c.GetId(), c.GetVolumeId(), c.GetAllocId())
		case c.GetNodeId() != "" && c.GetNodeId() != pn.id:
			return fmt.Errorf("%w: claim %q on volume %q names node %q, its alloc %q is on node %q", ErrInvalidCommand, c.GetId(), c.GetVolumeId(), c.GetNodeId(), c.GetAllocId(), pn.id)
		case c.GetMode() != pb.ClaimMode_CLAIM_MODE_READ && c.GetMode() != pb.ClaimMode_CLAIM_MODE_WRITE:
			return fmt.Errorf("%w: claim %q of alloc %q on volume %q has mode %s", ErrInvalidCommand, c.GetId(), c.GetAllocId(), c.GetVolumeId(), c.GetMode())
		case seen[c.GetId()]:
			return fmt.Errorf("%w: claim %q is in the plan twice", ErrInvalidCommand, c.GetId())
		case pairs[[2]string{c.GetAllocId(), c.GetVolumeId()}]:
			return fmt.Errorf("%w: alloc %q claims volume %q twice", ErrInvalidCommand, c.GetAllocId(), c.GetVolumeId())
		}
		seen[c.GetId()] = true
		pairs[[2]string{c.GetAllocId(), c.GetVolumeId()}] = true
		c.NodeId = pn.id
		// Reserved until stored (reservation.store may make it ready), so
		// a refusal naming it as the claim in the way says what it is.
		c.State = pb.ClaimState_CLAIM_STATE_RESERVED
		existing, err := checkNewClaim(tx, c)
		if err != nil {
			return err
		}
		if existing != nil {
			continue
		}
		pn.claims = append(pn.claims, &reservation{claim: c})
	}
	return nil
}

// checkPlanClaims returns why the node refuses its claims, "" when they
// all fit, filling in their reservations. accepted are the claims of the
// nodes that took their part before this one.
func checkPlanClaims(tx *writeTxn, pn *planNode, accepted []*pb.Claim) (string, error) {
	if len(pn.claims) == 0 {
		return "", nil
	}
	pending := accepted[:len(accepted):len(accepted)]
	for _, r := range pn.claims {
		checked, err := checkReservation(tx, r.claim, pending)
		switch {
		case errors.Is(err, ErrVolumeNotFound), errors.Is(err, ErrVolumeDeleting), errors.Is(err, ErrNoFreeClaim),
			errors.Is(err, ErrClaimCapability), errors.Is(err, ErrAttachmentTransition), errors.Is(err, ErrMaxVolumes):
			return fmt.Sprintf("node %q: %v", pn.id, err), nil
		case err != nil:
			return "", err
		}
		*r = *checked
		pending = append(pending, r.claim)
	}
	return "", nil
}
