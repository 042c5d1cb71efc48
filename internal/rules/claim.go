package rules

import (
	"fmt"
	"strings"

	"berth.dev/berth/rpc/pb"
)

// Functions over volumes and claims that the state machine, the scheduler
// and the servers must agree on. The claim reservation in the state
// machine's PlanApply and OperatorClaim is the last word on them.
//
// A claim holds its volume from its reservation until it is freed (its row
// removed): a releasing or node-detached claim still counts, because until
// then the volume may still be published on, or attached to, its node. So
// a replacement of a single-writer alloc is placed once the old claim is
// freed, never while both could write.

// AccessModeLimits is what an access mode allows of the claims a volume
// holds at once (DESIGN "Claim and attachment states"): whether they may be
// on more than one node, whether any may write, and how many writers and
// claims in all it takes (0: no limit).
type AccessModeLimits struct {
	MultiNode  bool
	Write      bool
	MaxWriters int
	MaxClaims  int
}

// AccessModeLimitsOf returns the limits of an access mode; ok is false for
// unspecified and for a mode this version does not know, which no claim may
// use.
func AccessModeLimitsOf(m pb.VolumeAccessMode) (AccessModeLimits, bool) {
	switch m {
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY:
		return AccessModeLimits{}, true
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER:
		return AccessModeLimits{Write: true, MaxWriters: 1}, true
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER:
		return AccessModeLimits{Write: true, MaxWriters: 1, MaxClaims: 1}, true
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER:
		return AccessModeLimits{Write: true}, true
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY:
		return AccessModeLimits{MultiNode: true}, true
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER:
		return AccessModeLimits{MultiNode: true, Write: true, MaxWriters: 1}, true
	case pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER:
		return AccessModeLimits{MultiNode: true, Write: true}, true
	}
	return AccessModeLimits{}, false
}

// CheckClaim reports whether claim c may be reserved on volume v beside
// held, the claims v holds (c itself, if among them, is skipped). The
// error wraps ErrClaimCapability (the volume has no such capability, or c
// writes through a reader-only mode), ErrNoFreeClaim (the access mode's
// limit is reached, another node holds a single-node volume, or the volume
// is held in another access mode) or ErrInvalidCommand (no mode), and
// names the volume, c's claimant and node, and the claim in the way. A
// volume its plugin is deleting takes no claim (ErrVolumeDeleting).
func CheckClaim(v *pb.Volume, held []*pb.Claim, c *pb.Claim) error {
	who := fmt.Sprintf("volume %q, %s on node %q", v.GetId(), Claimant(c), c.GetNodeId())
	if v.GetDeleting() {
		return fmt.Errorf("%s: %w by its plugin", who, ErrVolumeDeleting)
	}
	if c.GetMode() != pb.ClaimMode_CLAIM_MODE_READ && c.GetMode() != pb.ClaimMode_CLAIM_MODE_WRITE {
		return fmt.Errorf("%w: %s: claim mode %s", ErrInvalidCommand, who, c.GetMode())
	}
	if !HasCapability(v, c.GetAccessMode(), c.GetAttachmentMode()) {
		return fmt.Errorf("%s: %w: %s/%s (it offers %s)", who, ErrClaimCapability,
			pb.EnumWord(c.GetAccessMode()), pb.EnumWord(c.GetAttachmentMode()), capabilityWords(v))
	}
	limits, ok := AccessModeLimitsOf(c.GetAccessMode())
	if !ok {
		return fmt.Errorf("%s: %w: access mode %s", who, ErrClaimCapability, pb.EnumWord(c.GetAccessMode()))
	}
	write := c.GetMode() == pb.ClaimMode_CLAIM_MODE_WRITE
	if write && !limits.Write {
		return fmt.Errorf("%s: %w: a write claim through %s", who, ErrClaimCapability, pb.EnumWord(c.GetAccessMode()))
	}
	claims, writers := 1, 0
	if write {
		writers = 1
	}
	for _, h := range held {
		if h.GetId() == c.GetId() {
			continue
		}
		switch {
		case h.GetAccessMode() != c.GetAccessMode():
			return fmt.Errorf("%s: %w: %s holds it as %s, not %s", who, ErrNoFreeClaim,
				DescribeClaim(h), pb.EnumWord(h.GetAccessMode()), pb.EnumWord(c.GetAccessMode()))
		case !limits.MultiNode && h.GetNodeId() != c.GetNodeId():
			return fmt.Errorf("%s: %w: %s holds it on node %q and %s allows one node", who, ErrNoFreeClaim,
				DescribeClaim(h), h.GetNodeId(), pb.EnumWord(c.GetAccessMode()))
		}
		claims++
		if h.GetMode() == pb.ClaimMode_CLAIM_MODE_WRITE {
			writers++
		}
		if limits.MaxClaims > 0 && claims > limits.MaxClaims {
			return fmt.Errorf("%s: %w: %s holds it and %s allows %d claim", who, ErrNoFreeClaim,
				DescribeClaim(h), pb.EnumWord(c.GetAccessMode()), limits.MaxClaims)
		}
		if write && limits.MaxWriters > 0 && writers > limits.MaxWriters {
			return fmt.Errorf("%s: %w: %s writes and %s allows %d writer", who, ErrNoFreeClaim,
				DescribeClaim(h), pb.EnumWord(c.GetAccessMode()), limits.MaxWriters)
		}
	}
	return nil
}

// HasCapability reports whether v offers the access and attachment mode.
func HasCapability(v *pb.Volume, access pb.VolumeAccessMode, attach pb.VolumeAttachmentMode) bool {
	for _, c := range v.GetCapabilities() {
		if c.GetAccessMode() == access && c.GetAttachmentMode() == attach {
			return true
		}
	}
	return false
}

func capabilityWords(v *pb.Volume) string {
	var words []string
	for _, c := range v.GetCapabilities() {
		words = append(words, pb.EnumWord(c.GetAccessMode())+"/"+pb.EnumWord(c.GetAttachmentMode()))
	}
	if len(words) == 0 {
		return "none"
	}
	return strings.Join(words, ", ")
}

// Claimant names who holds a claim: `alloc "a1"` or `operator claim "c1"`.
func Claimant(c *pb.Claim) string {
	if c.GetOperator() || c.GetAllocId() == "" {
		return fmt.Sprintf("operator claim %q", c.GetId())
	}
	return fmt.Sprintf("alloc %q", c.GetAllocId())
}

// DescribeClaim names a claim by ID, claimant, node and state, for
// refusals that point at the claim in the way.
func DescribeClaim(c *pb.Claim) string {
	if c.GetOperator() || c.GetAllocId() == "" {
		return fmt.Sprintf("operator claim %q (%s, %s, node %q)", c.GetId(), pb.EnumWord(c.GetMode()), pb.EnumWord(c.GetState()), c.GetNodeId())
	}
	return fmt.Sprintf("claim %q of alloc %q (%s, %s, node %q)", c.GetId(), c.GetAllocId(), pb.EnumWord(c.GetMode()), pb.EnumWord(c.GetState()), c.GetNodeId())
}

// ClaimLive reports whether a claim still needs its node's attachment:
// every state before node-detached (a releasing claim is still published
// on its node until the client says otherwise).
func ClaimLive(c *pb.Claim) bool {
	return c.GetState() < pb.ClaimState_CLAIM_STATE_NODE_DETACHED
}
