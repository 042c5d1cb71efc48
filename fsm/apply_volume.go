package fsm

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// applyVolumeRegister creates or updates a volume.
//
// Refused (ErrInvalidCommand): a volume without ID, plugin or capability,
// a capability with an unspecified access or attachment mode, a requested
// capacity whose minimum is over its maximum. A mode number this version
// does not know is stored as it came (version skew: the proposer
// validates; rules.CheckClaim refuses claims through it).
//
// A plugin's volume is registered under one ID: with unique_external (set
// by the leader once every server knows the rule; an older server ignores
// it), a volume whose plugin and
// external ID another volume ID holds is refused (ErrExternalVolumeTaken,
// naming both), whether it is new or an update moving to that pair, so
// claims counted per volume ID always count every claim of the plugin's
// volume. An update keeping the pair it is stored with is not refused:
// a duplicate from before the rule stays usable until one is deregistered.
//
// An update of a volume that holds claims keeps what they depend on: its
// plugin_id and external_id, and the capability of every claim
// (ErrVolumeInUse, naming the volume, the field and the claims).
//
// A volume its plugin is deleting (VolumeDeleting) is refused
// (ErrVolumeDeleting): the update would be lost with it. With
// if_modify_index the update applies only to the volume as its proposer
// read it (ErrVolumeChanged, or ErrVolumeNotFound when it is gone); with
// if_absent only when no volume is registered under the ID
// (ErrVolumeRegistered; the leader sets it, too, only once every server
// knows it).
//
// The create index and time are kept across updates. Provider, provider
// version, schedulable and controller_required are copied from the
// plugin's row of csi_plugins (and kept in step by volumesPluginChanged);
// while the plugin has no row the volume is not schedulable and keeps the
// provider and controller_required the command carries (the endpoint
// learnt them from the plugin it validated the volume with). An update that changes nothing writes
// nothing, so re-registering the same spec is idempotent.
func applyVolumeRegister(tx *writeTxn, cmd *pb.VolumeRegisterCommand) error {
	v := cmd.GetVolume()
	if err := checkVolume(v); err != nil {
		return err
	}
	existing, err := volumesTable.first(tx, nil, v.GetId())
	if err != nil {
		return err
	}
	if existing != nil && cmd.GetIfAbsent() {
		return fmt.Errorf("volume %q: %w (external ID %q, plugin %q)", v.GetId(), ErrVolumeRegistered, existing.GetExternalId(), existing.GetPluginId())
	}
	if want := cmd.GetIfModifyIndex(); want != 0 {
		switch {
		case existing == nil:
			return fmt.Errorf("volume %q: %w (deregistered since it was read at index %d)", v.GetId(), ErrVolumeNotFound, want)
		case existing.GetModifyIndex() != want:
			return fmt.Errorf("volume %q: %w: read at index %d, changed at %d", v.GetId(), ErrVolumeChanged, want, existing.GetModifyIndex())
		}
	}
	if cmd.GetUniqueExternal() {
		if err := checkExternalFree(tx, existing, v); err != nil {
			return err
		}
	}
	// Only VolumeDeleting sets the mark.
	v.Deleting = false
	if existing != nil {
		if existing.GetDeleting() {
			return fmt.Errorf("volume %q: %w by its plugin; register it again once the delete is done (or deregister it first)",
				v.GetId(), ErrVolumeDeleting)
		}
		claims, err := claimsByVolume.list(tx, nil, v.GetId())
		if err != nil {
			return err
		}
		if err := checkVolumeUpdate(existing, v, claims); err != nil {
			return err
		}
	}
	plugin, err := csiPluginsTable.first(tx, nil, v.GetPluginId())
	if err != nil {
		return err
	}
	mirrorPlugin(v, plugin)
	v.CreateIndex, v.CreatedAt = tx.index, cmd.GetRegisteredAt()
	if existing != nil {
		v.CreateIndex, v.CreatedAt = existing.GetCreateIndex(), existing.GetCreatedAt()
		v.ModifyIndex, v.ModifiedAt = existing.GetModifyIndex(), existing.GetModifiedAt()
		if proto.Equal(v, existing) {
			return nil
		}
	}
	v.ModifyIndex, v.ModifiedAt = tx.index, cmd.GetRegisteredAt()
	return volumesTable.insert(tx, v)
}

// checkVolume refuses what no server could store as a volume.
func checkVolume(v *pb.Volume) error {
	switch {
	case v == nil:
		return fmt.Errorf("%w: no volume", ErrInvalidCommand)
	case v.GetId() == "":
		return fmt.Errorf("%w: volume has no ID (name %q)", ErrInvalidCommand, v.GetName())
	case v.GetPluginId() == "":
		return fmt.Errorf("%w: volume %q names no plugin", ErrInvalidCommand, v.GetId())
	case len(v.GetCapabilities()) == 0:
		return fmt.Errorf("%w: volume %q has no capability", ErrInvalidCommand, v.GetId())
	case v.GetRequestedCapacityMaxBytes() > 0 && v.GetRequestedCapacityMinBytes() > v.GetRequestedCapacityMaxBytes():
		return fmt.Errorf("%w: volume %q: capacity_min %d is over capacity_max %d", ErrInvalidCommand,
			v.GetId(), v.GetRequestedCapacityMinBytes(), v.GetRequestedCapacityMaxBytes())
	}
	for i, c := range v.GetCapabilities() {
		if c.GetAccessMode() == pb.VolumeAccessMode_VOLUME_ACCESS_MODE_UNSPECIFIED ||
			c.GetAttachmentMode() == pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_UNSPECIFIED {
			return fmt.Errorf("%w: volume %q: capability %d of %d has no access mode or no attachment mode",
				ErrInvalidCommand, v.GetId(), i+1, len(v.GetCapabilities()))
		}
	}
	return nil
}

// checkExternalFree refuses v when another volume ID holds its plugin's
// volume (same plugin and external ID). A volume without an external ID
// (none is stored) is in no such pair. Only a new registration or a move
// to another pair is refused: an update of a volume stored with the same
// pair already (existing) is not, so two IDs of one plugin's volume left
// by a server from before the rule are not frozen — each can still be
// registered again, expanded and deregistered.
func checkExternalFree(tx *writeTxn, existing, v *pb.Volume) error {
	if v.GetExternalId() == "" {
		return nil
	}
	if existing.GetPluginId() == v.GetPluginId() && existing.GetExternalId() == v.GetExternalId() {
		return nil
	}
	held, err := volumesByExternal.list(tx, nil, v.GetPluginId(), v.GetExternalId())
	if err != nil {
		return err
	}
	for _, o := range held {
		if o.GetId() != v.GetId() {
			return fmt.Errorf("volume %q: plugin %q's volume with external ID %q is registered already as volume %q: %w",
				v.GetId(), v.GetPluginId(), v.GetExternalId(), o.GetId(), ErrExternalVolumeTaken)
		}
	}
	return nil
}

// checkVolumeUpdate refuses an update that would pull a volume from under
// its claims.
func checkVolumeUpdate(old, v *pb.Volume, claims []*pb.Claim) error {
	if len(claims) == 0 {
		return nil
	}
	switch {
	case old.GetPluginId() != v.GetPluginId():
		return fmt.Errorf("volume %q: %w: plugin_id cannot change from %q to %q while it has claims: %s",
			v.GetId(), ErrVolumeInUse, old.GetPluginId(), v.GetPluginId(), describeClaims(claims))
	case old.GetExternalId() != v.GetExternalId():
		return fmt.Errorf("volume %q: %w: external_id cannot change from %q to %q while it has claims: %s",
			v.GetId(), ErrVolumeInUse, old.GetExternalId(), v.GetExternalId(), describeClaims(claims))
	}
	for _, c := range claims {
		if !rules.HasCapability(v, c.GetAccessMode(), c.GetAttachmentMode()) {
			return fmt.Errorf("volume %q: %w: capability %s/%s is used by %s", v.GetId(), ErrVolumeInUse,
				pb.EnumWord(c.GetAccessMode()), pb.EnumWord(c.GetAttachmentMode()), rules.DescribeClaim(c))
		}
	}
	return nil
}

// mirrorPlugin copies into v what it shows of its plugin's row. With no
// row (p nil) the volume is not schedulable and keeps the rest: a plugin
// whose instances all went still requires the controller publish it did,
// and a claim reserved meanwhile (needsController) must not skip it.
func mirrorPlugin(v *pb.Volume, p *pb.CSIPlugin) {
	if p == nil {
		v.Schedulable = false
		return
	}
	v.Provider, v.ProviderVersion = p.GetProvider(), p.GetVersion()
	v.Schedulable, v.ControllerRequired = p.GetSchedulable(), p.GetControllerRequired()
}

// volumesPluginChanged refreshes the plugin mirrors of the plugin's
// volumes after its row changed (p nil: deleted). Only volumes whose
// mirrors differ are written. With no volumes it costs one read.
func volumesPluginChanged(tx *writeTxn, pluginID string, p *pb.CSIPlugin) error {
	vols, err := volumesByPlugin.list(tx, nil, pluginID)
	if err != nil {
		return err
	}
	for _, old := range vols {
		v := proto.Clone(old).(*pb.Volume)
		mirrorPlugin(v, p)
		if proto.Equal(v, old) {
			continue
		}
		v.ModifyIndex = tx.index
		if err := volumesTable.insert(tx, v); err != nil {
			return err
		}
	}
	return nil
}

// applyVolumeDeregister removes a volume. One that is not stored is no
// error (a retried deregister already applied). A volume with claims is
// refused (ErrVolumeInUse, naming them); with force, it is removed with
// its claims and attachments when every claimant is terminal
// (claimantTerminal: node-detached, its node gone or fenced, its alloc
// gone or stopped on its client, or its node down). Force is refused,
// as a deregister without it, while the volume has an attachment
// (attaching, attached or detaching: ErrVolumeInUse naming node and
// state): the attachment is berth's record that the volume may be
// published to that node, and only its ControllerUnpublishVolume, made by
// the leader's attach reconciler, undoes that at the provider. Dropping it
// with the volume would leave the volume published for good (no row left
// to unpublish from, and the reconcile pass compares only registered
// volumes). The claims that force accepts move it on by themselves: once
// node-detached (or forced there by the reaper for a down, fenced or
// gone node) the attachment detaches and its unpublish names the CSI node
// ID its publish named, so a node that is gone never holds it up.
func applyVolumeDeregister(tx *writeTxn, cmd *pb.VolumeDeregisterCommand) error {
	id := cmd.GetVolumeId()
	if id == "" {
		return fmt.Errorf("%w: no volume ID", ErrInvalidCommand)
	}
	v, err := volumesTable.first(tx, nil, id)
	if err != nil || v == nil {
		return err
	}
	claims, err := claimsByVolume.list(tx, nil, id)
	if err != nil {
		return err
	}
	if len(claims) > 0 && !cmd.GetForce() {
		return fmt.Errorf("volume %q: %w: %s (force deregisters once every claimant is terminal and the leader has unpublished every attachment)",
			id, ErrVolumeInUse, describeClaims(claims))
	}
	var live []*pb.Claim
	for _, c := range claims {
		terminal, err := claimantTerminal(tx, c)
		if err != nil {
			return err
		}
		if !terminal {
			live = append(live, c)
		}
	}
	if len(live) > 0 {
		return fmt.Errorf("volume %q: %w: force needs each claim node-detached or its node gone or fenced, or, an alloc's, its alloc stopped on its client or its node down; still live: %s",
			id, ErrVolumeInUse, describeClaims(live))
	}
	atts, err := attachmentsTable.list(tx, nil, id)
	if err != nil {
		return err
	}
	if len(atts) > 0 {
		return fmt.Errorf("volume %q: %w: its controller attachments are not unpublished yet: %s; the leader unpublishes each once its claims are node-detached (a gone node's with the CSI node ID its publish named), and force does not skip that: deregister again once none is left",
			id, ErrVolumeInUse, describeAttachments(atts))
	}
	for _, c := range claims {
		if err := claimsTable.delete(tx, c); err != nil {
			return err
		}
	}
	return volumesTable.delete(tx, v)
}

// describeAttachments names up to five attachments by node and state,
// then how many more there are.
func describeAttachments(atts []*pb.Attachment) string {
	const most = 5
	var parts []string
	for i, a := range atts {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(atts)-most))
			break
		}
		parts = append(parts, fmt.Sprintf("node %q (attachment %s)", a.GetNodeId(), pb.EnumWord(a.GetState())))
	}
	return strings.Join(parts, ", ")
}

// claimantTerminal reports whether a claim's holder can no longer use the
// volume, so that a forced deregister may drop the claim without two
// writers once the volume is registered again: the claim is node-detached
// (its node unpublished it, or the leader forced that for a node down past
// force_detach_after or fenced), or its node is gone or fenced; an
// alloc's claim also when the alloc is gone or client-terminal (its tasks
// have stopped: a releasing claim or a server-side stop only says they
// were asked to) or its node is down. An operator's claim on a down node
// stays live: no client stops an operator's use of the host path.
func claimantTerminal(tx *writeTxn, c *pb.Claim) (bool, error) {
	if c.GetState() >= pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
		return true, nil
	}
	node, err := nodesTable.first(tx, nil, c.GetNodeId())
	if err != nil {
		return false, err
	}
	if node == nil || node.GetFenced() {
		return true, nil
	}
	if c.GetOperator() || c.GetAllocId() == "" {
		return false, nil
	}
	if node.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN {
		return true, nil
	}
	a, err := allocsTable.first(tx, nil, c.GetAllocId())
	if err != nil {
		return false, err
	}
	return a == nil || rules.AllocClientTerminal(a), nil
}

// describeClaims names up to five claims, then how many more there are.
func describeClaims(claims []*pb.Claim) string {
	const most = 5
	var parts []string
	for i, c := range claims {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(claims)-most))
			break
		}
		parts = append(parts, rules.DescribeClaim(c))
	}
	return strings.Join(parts, ", ")
}

// applyVolumeDeleting marks a volume as being deleted by its plugin, or
// clears the mark. Marking checks, in the apply that sets it, that the
// volume holds no claim (ErrVolumeInUse, naming them): from then on
// rules.CheckClaim refuses every claim (ErrVolumeDeleting), so none can be
// granted between the check and the plugin's DeleteVolume, which the
// endpoint makes only after this applied. Marking a volume that is not
// stored is refused (ErrVolumeNotFound); marking a marked volume, or
// clearing one that is gone or not marked, changes nothing (a retried or
// concurrent delete).
func applyVolumeDeleting(tx *writeTxn, cmd *pb.VolumeDeletingCommand) error {
	id := cmd.GetVolumeId()
	if id == "" {
		return fmt.Errorf("%w: no volume ID", ErrInvalidCommand)
	}
	v, err := volumesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	switch {
	case v == nil && cmd.GetDeleting():
		return fmt.Errorf("volume %q: %w", id, ErrVolumeNotFound)
	case v == nil, v.GetDeleting() == cmd.GetDeleting():
		return nil
	}
	if cmd.GetDeleting() {
		claims, err := claimsByVolume.list(tx, nil, id)
		if err != nil {
			return err
		}
		if len(claims) > 0 {
			return fmt.Errorf("volume %q: %w: it cannot be deleted while it has claims: %s", id, ErrVolumeInUse, describeClaims(claims))
		}
	}
	n := proto.Clone(v).(*pb.Volume)
	n.Deleting = cmd.GetDeleting()
	n.ModifiedAt, n.ModifyIndex = cmd.GetUpdatedAt(), tx.index
	return volumesTable.insert(tx, n)
}
