package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// Dynamic host volumes (table host_volumes). HostVolumeRegister records a
// volume before its node is asked to make it (pending: the name is taken,
// no claim), once its node made it (ready), or moves it to deleting; a
// move out of deleting is refused unless it is a failed delete's put_back
// (ErrVolumeDeleting: a create does not revive a volume being deleted),
// and a put_back applies only while the volume is deleting under the mark
// it undoes (mark_index, ErrHostVolumeMarkChanged); a deleting mark on a
// volume deleting must name the mark it takes over (a delete again). A
// must_exist move to ready carrying mark_index (a node's registration
// promoting a pending volume it reports) applies only while the volume is
// still pending at that index (ErrHostVolumeNotPending): the create's own
// answer, recorded between the report's read and its apply, is not
// overwritten (its capacity would be lost). The move to
// deleting is refused while a claim holds the volume (ErrVolumeInUse), and
// from then on rules.CheckClaim refuses every claim on it, so none is
// granted between the check and the node's delete. HostVolumeDelete
// forgets it once the node removed it; refused while a claim holds it.
//
// Claims on dynamic host volumes are rows of the claims table like CSI
// ones (checkReservation reads the volume from either table): the same
// access-mode rules, no attachment, ready at once. As nothing on the node
// is to be undone, such a claim is freed in the apply of its client's
// report that the alloc stopped (or the alloc's collection); an alloc only
// the servers stopped or marked lost holds it releasing until its client
// says its tasks stopped (or its node is forced: the reaper), so a
// single-writer volume never has two live writers. Claims of this kind exist only once every server knows the
// commands above (the gate), so no older server applies them.

// applyHostVolumeRegister stores a dynamic host volume, or updates one.
func applyHostVolumeRegister(tx *writeTxn, cmd *pb.HostVolumeRegisterCommand) error {
	v := cmd.GetVolume()
	switch {
	case v == nil:
		return fmt.Errorf("%w: no host volume", ErrInvalidCommand)
	case v.GetId() == "" || v.GetName() == "" || v.GetNodeId() == "":
		return fmt.Errorf("%w: host volume %q (name %q) needs an ID, a name and a node", ErrInvalidCommand, v.GetId(), v.GetName())
	case v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_READY && v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_DELETING &&
		v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_PENDING:
		return fmt.Errorf("%w: host volume %q: state %s", ErrInvalidCommand, v.GetId(), v.GetState())
	}
	existing, err := hostVolumesTable.first(tx, nil, v.GetId())
	if err != nil {
		return err
	}
	if existing != nil && existing.GetNodeId() != v.GetNodeId() {
		return fmt.Errorf("%w: host volume %q is on node %s, not %s", ErrInvalidCommand, v.GetId(), existing.GetNodeId(), v.GetNodeId())
	}
	deleting := existing.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING
	switch {
	case cmd.GetMustExist() && existing == nil:
		return fmt.Errorf("host volume %q (%s) on node %s: %w: forgotten meanwhile (deleted); create it anew", v.GetName(), v.GetId(), v.GetNodeId(), ErrVolumeNotFound)
	case cmd.GetMustExist() && cmd.GetMarkIndex() != 0 && !cmd.GetPutBack() &&
		(existing.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_PENDING || existing.GetModifyIndex() != cmd.GetMarkIndex()):
		// A node's report promoting the pending row it read (at
		// mark_index): a create's answer (with the plugin's capacity), a
		// delete or another report moved it on meanwhile, and wins.
		return fmt.Errorf("host volume %q (%s) on node %s: %w: it is %s at index %d, not pending at index %d",
			v.GetName(), v.GetId(), v.GetNodeId(), ErrHostVolumeNotPending, pb.EnumWord(existing.GetState()), existing.GetModifyIndex(), cmd.GetMarkIndex())
	case cmd.GetPutBack():
		if err := checkPutBack(existing, v, cmd.GetMarkIndex()); err != nil {
			return err
		}
	case deleting && v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_DELETING:
		return fmt.Errorf("host volume %q (%s) on node %s: %w: delete it again to finish, then create it anew", v.GetName(), v.GetId(), v.GetNodeId(), ErrVolumeDeleting)
	case deleting && cmd.GetMarkIndex() != existing.GetModifyIndex():
		// A second delete's mark: only one that read the current mark
		// (its index) takes over, so a concurrent delete's put_back of
		// the older mark is refused.
		return fmt.Errorf("host volume %q (%s) on node %s: %w: another delete marked it at index %d (this one read index %d): run delete again",
			v.GetName(), v.GetId(), v.GetNodeId(), ErrVolumeDeleting, existing.GetModifyIndex(), cmd.GetMarkIndex())
	}
	same, err := hostVolumesByNode.list(tx, nil, v.GetNodeId(), v.GetName())
	if err != nil {
		return err
	}
	for _, o := range same {
		if o.GetId() != v.GetId() {
			return fmt.Errorf("host volume %q on node %s: %w: volume %s has the name", v.GetName(), v.GetNodeId(), ErrHostVolumeNameTaken, o.GetId())
		}
	}
	if v.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING {
		if existing == nil {
			return fmt.Errorf("host volume %q: %w", v.GetId(), ErrVolumeNotFound)
		}
		claims, err := claimsByVolume.list(tx, nil, v.GetId())
		if err != nil {
			return err
		}
		if len(claims) > 0 {
			return fmt.Errorf("host volume %q (%s) on node %s: %w: %s", v.GetName(), v.GetId(), v.GetNodeId(), ErrVolumeInUse, describeClaims(claims))
		}
	}
	n := proto.CloneOf(v)
	n.CreateIndex, n.ModifyIndex = tx.index, tx.index
	if existing != nil {
		n.CreateIndex = existing.GetCreateIndex()
		n.CreatedAt = existing.GetCreatedAt()
	}
	return hostVolumesTable.insert(tx, n)
}

// checkPutBack refuses a put_back unless the volume is still deleting
// under the mark it undoes (markIndex): one forgotten is not re-inserted,
// one another delete re-marked is not reopened under it.
func checkPutBack(existing, v *pb.HostVolume, markIndex uint64) error {
	switch {
	case existing == nil:
		return fmt.Errorf("host volume %q (%s) on node %s: %w: it is forgotten already", v.GetName(), v.GetId(), v.GetNodeId(), ErrHostVolumeMarkChanged)
	case existing.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_DELETING:
		return fmt.Errorf("host volume %q (%s) on node %s: %w: it is %s, not deleting", v.GetName(), v.GetId(), v.GetNodeId(), ErrHostVolumeMarkChanged, pb.EnumWord(existing.GetState()))
	case existing.GetModifyIndex() != markIndex:
		return fmt.Errorf("host volume %q (%s) on node %s: %w: marked deleting at index %d, not %d (another delete holds it)",
			v.GetName(), v.GetId(), v.GetNodeId(), ErrHostVolumeMarkChanged, existing.GetModifyIndex(), markIndex)
	case v.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_DELETING:
		return fmt.Errorf("%w: host volume %q: a put_back to deleting", ErrInvalidCommand, v.GetId())
	}
	return nil
}

// applyHostVolumeDelete forgets a dynamic host volume; one not stored is
// gone already.
func applyHostVolumeDelete(tx *writeTxn, cmd *pb.HostVolumeDeleteCommand) error {
	if cmd.GetId() == "" {
		return fmt.Errorf("%w: no host volume ID", ErrInvalidCommand)
	}
	v, err := hostVolumesTable.first(tx, nil, cmd.GetId())
	if err != nil || v == nil {
		return err
	}
	claims, err := claimsByVolume.list(tx, nil, v.GetId())
	if err != nil {
		return err
	}
	if len(claims) > 0 {
		return fmt.Errorf("host volume %q (%s) on node %s: %w: %s", v.GetName(), v.GetId(), v.GetNodeId(), ErrVolumeInUse, describeClaims(claims))
	}
	return hostVolumesTable.delete(tx, v)
}

// hostClaimVolume returns the claim view of the dynamic host volume id
// (rules.HostVolumeClaimView), or nil; a pending one (its node has not
// made it) takes no claim (ErrVolumeNotFound).
func hostClaimVolume(tx *writeTxn, id string) (*pb.Volume, error) {
	hv, err := hostVolumesTable.first(tx, nil, id)
	if err != nil || hv == nil {
		return nil, err
	}
	if hv.GetState() == pb.HostVolumeState_HOST_VOLUME_STATE_PENDING {
		return nil, fmt.Errorf("host volume %q (%s) on node %s: %w: pending, its node has not made it yet", hv.GetName(), hv.GetId(), hv.GetNodeId(), ErrVolumeNotFound)
	}
	return rules.HostVolumeClaimView(hv), nil
}

// releaseHostClaim moves a host volume claim of alloc a (nil: gone) on:
// freed when the alloc's client reported it stopped in this apply
// (clientStopped) or the alloc is gone (collected), releasing when the
// servers stopped it or marked it lost (a client status the servers set:
// a partitioned client may still run it, and a sticky replacement may be
// placed on that node). A releasing claim is freed by its client's later
// stop report, or by the reaper once the node is forced. It reports
// whether it handled c.
func releaseHostClaim(tx *writeTxn, c *pb.Claim, a *pb.Allocation, clientStopped bool, at int64) (bool, error) {
	if !rules.HostClaim(c) {
		return false, nil
	}
	switch {
	case a == nil || clientStopped:
		return true, claimsTable.delete(tx, c)
	case c.GetState() < pb.ClaimState_CLAIM_STATE_RELEASING && rules.AllocTerminal(a):
		return true, writeClaimState(tx, c, pb.ClaimState_CLAIM_STATE_RELEASING, at)
	}
	return true, nil
}
