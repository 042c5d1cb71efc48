package endpoints

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"berth.dev/berth/internal/versions"

	"berth.dev/berth/internal/rules"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// volumesSince is the first berth version whose servers know the volume
// tables and commands (17-23). Under the table rule (fsm/doc.go) they are
// proposed only once every server has recorded a version at least this.
var volumesSince = versions.MustConstraint(">= " + VolumesSinceVersion)

// VolumesSinceVersion is the version volumesSince names.
const VolumesSinceVersion = "0.1.0-dev"

// volumeIdentitySince is the first berth version whose servers refuse, in
// VolumeRegister's apply, a second volume ID for one plugin's volume
// (unique_external) and a create of a registered ID (if_absent). Until
// every server records it, the command is proposed without either flag
// and every server applies it as an older one does (no refusal), so
// servers of two versions never diverge.
var volumeIdentitySince = versions.MustConstraint(">= " + VolumeIdentitySinceVersion)

// VolumeIdentitySinceVersion is the version volumeIdentitySince names.
const VolumeIdentitySinceVersion = "0.1.0-dev.2"

var (
	// ErrNoHealthyController is returned by the Volumes calls that need a
	// controller when the plugin has none healthy (or none at all).
	ErrNoHealthyController = errcode.New(codes.FailedPrecondition, "no healthy controller of the csi plugin")
	// ErrPluginUnknown is returned when a volume names a plugin no node
	// reports.
	ErrPluginUnknown = errcode.New(codes.FailedPrecondition, "no node reports the csi plugin")
	// ErrVolumeExists is returned by Volumes.Create for an ID registered
	// as another volume than the create asks for (name, plugin,
	// capabilities, ...): the message names the volume and each field that
	// differs.
	ErrVolumeExists = errcode.New(codes.AlreadyExists, "a different volume is registered under the ID")
	// ErrPluginCannot is returned when the plugin's controller lacks the
	// capability a call needs (create/delete, snapshots, expand).
	ErrPluginCannot = errcode.New(codes.FailedPrecondition, "the csi plugin's controller does not support the call")
)

// volumesEndpoint is the Volumes service (volumes_rpc.proto).
type volumesEndpoint struct {
	pb.UnimplementedVolumesServer
	s     *api
	calls volumeloops.ControllerCaller
	// detacher makes Detach's node calls.
	detacher NodeDetacher
	// nodes makes node expansions (volumes_expand.go); nil: none.
	nodes NodeExpander
	// lostRace, when set (tests), is called after a create's register
	// was refused for a volume registered under the ID during the plugin's
	// call, before that volume is read.
	lostRace func(volumeID string)
}

// controllerFor picks the node whose controller instance of the plugin
// serves a volume API call, with the leader's picker (an instance that
// advertises capability, healthy, on a ready, unfenced node; the least
// loaded, ties by node ID). hasController is false when the plugin has no
// controller service at all (a node-only plugin), so the caller can ask a
// node instance instead. Controllers none of which advertises capability
// are ErrPluginCannot, naming them.
func controllerFor(st *fsm.StateSnapshot, pluginID string, capability volumeloops.Cap) (nodeID string, info *pb.CSIPluginInfo, hasController bool, err error) {
	p, err := st.CSIPluginFacts(nil, pluginID)
	if err != nil {
		return "", nil, false, err
	}
	if p == nil {
		return "", nil, false, fmt.Errorf("csi plugin %q: %w", pluginID, ErrPluginUnknown)
	}
	controllers, err := st.CSIPluginControllers(nil, pluginID)
	if err != nil {
		return "", nil, false, err
	}
	if len(controllers) == 0 {
		return "", nil, false, nil
	}
	id, err := volumeloops.PickController(st, pluginID, capability, "")
	if errors.Is(err, volumeloops.ErrNoController) {
		return "", nil, true, fmt.Errorf("%w: %s", ErrNoHealthyController, err.Error())
	}
	if errors.Is(err, volumeloops.ErrNoCapableController) {
		return "", nil, true, fmt.Errorf("%w: %s", ErrPluginCannot, err.Error())
	}
	if err != nil {
		return "", nil, true, err
	}
	return id, controllers[id], true, nil
}

// controller is a CSI client of a healthy controller of the plugin, and
// the node it runs on and what the servers know of it. The client's calls
// are for that instance only: a node serving the plugin ID with another
// one by then refuses them (csi.InstanceChanged).
func (e *volumesEndpoint) controller(pluginID string, capability volumeloops.Cap) (*csi.Client, string, *pb.CSIPluginInfo, error) {
	nodeID, info, has, err := controllerFor(e.s.State().Snapshot(), pluginID, capability)
	if err != nil {
		return nil, "", nil, err
	}
	if !has {
		return nil, "", nil, fmt.Errorf("csi plugin %q has no controller service: %w", pluginID, ErrPluginCannot)
	}
	return volumeloops.ClientVia(e.calls, e.s.Logger, nodeID, pluginID, csi.InstanceOf(info)), nodeID, info, nil
}

func (e *volumesEndpoint) requireVersion() error {
	return e.s.RequireServersAt(volumesSince, VolumesSinceVersion, "CSI volume commands")
}

// Register checks the volume, validates its capabilities with a healthy
// controller of its plugin and registers it. Registered with a warning
// (in the answer and the server's log) that nothing was validated: a
// plugin without a controller service, and one that answers without
// `confirmed` (it validated nothing it is sure of; Azure's and Linode's
// plugins answer valid so), whose message the warning carries; and one
// whose confirmation leaves out an access type (csi.Validation.Notes). A
// confirmation that drops or changes a field berth sent is refused
// (csi.ErrConfirmationMismatch, FailedPrecondition, naming the field).
func (e *volumesEndpoint) Register(ctx context.Context, req *pb.VolumeRegisterRequest) (*pb.VolumeRegisterResponse, error) {
	v := proto.CloneOf(req.GetVolume())
	if v == nil {
		return nil, fmt.Errorf("volume register: %w: no volume", volumespec.ErrInvalidVolume)
	}
	volumespec.Canonicalize(v)
	if err := volumespec.Validate(v, volumespec.ForRegister); err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	st := e.s.State().Snapshot()
	stored, err := st.VolumeByID(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	if err := keepRedactedSecrets(v, stored); err != nil {
		return nil, err
	}
	nodeID, info, has, err := controllerFor(st, v.GetPluginId(), volumeloops.CapAnyController)
	if err != nil {
		return nil, fmt.Errorf("volume %q: %w", v.GetId(), err)
	}
	var warnings []string
	if has {
		c := volumeloops.ClientVia(e.calls, e.s.Logger, nodeID, v.GetPluginId(), csi.InstanceOf(info))
		res, err := c.Controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
			VolumeId: v.GetExternalId(), VolumeContext: v.GetContext(), VolumeCapabilities: CSICapabilities(v),
			Parameters: v.GetParameters(), Secrets: v.GetSecrets(),
		})
		if err != nil {
			return nil, fmt.Errorf("volume %q: validating its capabilities with plugin %q on node %s: %w", v.GetId(), v.GetPluginId(), nodeID, err)
		}
		if !res.Confirmed {
			said := "it gave no message"
			if res.Message != "" {
				said = fmt.Sprintf("its message: %q", res.Message)
			}
			warnings = append(warnings, fmt.Sprintf("csi plugin %q (controller on node %s) answered ValidateVolumeCapabilities for volume %q without confirming it, "+
				"so the capabilities were not validated; %s", v.GetPluginId(), nodeID, v.GetId(), said))
		}
		for _, note := range res.Notes {
			warnings = append(warnings, fmt.Sprintf("csi plugin %q (controller on node %s) confirmed volume %q in part: %s", v.GetPluginId(), nodeID, v.GetId(), note))
		}
	} else {
		warnings = append(warnings, fmt.Sprintf("csi plugin %q has no controller service: the capabilities of volume %q were not validated", v.GetPluginId(), v.GetId()))
	}
	resp, err := e.register(ctx, v, warnings)
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		e.s.Logger.Warn("volume registered unvalidated", "volume_id", v.GetId(), "plugin_id", v.GetPluginId(), "warning", w)
	}
	return resp, nil
}

// register proposes the volume and answers it as stored, redacted.
func (e *volumesEndpoint) register(ctx context.Context, v *pb.Volume, warnings []string) (*pb.VolumeRegisterResponse, error) {
	return e.registerIf(ctx, v, 0, warnings)
}

// registerIf is register, applied only to the volume stored with
// modify_index ifIndex when that is not 0 (fsm.ErrVolumeChanged).
func (e *volumesEndpoint) registerIf(ctx context.Context, v *pb.Volume, ifIndex uint64, warnings []string) (*pb.VolumeRegisterResponse, error) {
	return e.registerCommand(ctx, &pb.VolumeRegisterCommand{Volume: v, IfModifyIndex: ifIndex}, warnings)
}

// registerCommand proposes cmd (stamped now, with unique_external, or
// without if_absent while a server is older than volumeIdentitySince)
// and answers its volume as stored, redacted.
func (e *volumesEndpoint) registerCommand(ctx context.Context, cmd *pb.VolumeRegisterCommand, warnings []string) (*pb.VolumeRegisterResponse, error) {
	v := cmd.GetVolume()
	cmd.RegisteredAt = e.s.Clock.Now().UnixNano()
	// Refused only while some server is older: the register then applies
	// under the rule every server knows (a create overwrites a volume
	// registered during its plugin call, as before).
	if e.s.RequireServersAt(volumeIdentitySince, VolumeIdentitySinceVersion, "one volume ID per plugin volume") == nil {
		cmd.UniqueExternal = true
	} else {
		cmd.IfAbsent = false
	}
	idx, err := e.s.Apply(ctx, fsm.VolumeRegister, cmd)
	if err != nil {
		return nil, fmt.Errorf("registering volume %q: %w", v.GetId(), err)
	}
	stored, err := e.s.State().VolumeByID(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	if stored == nil {
		stored = v
	}
	return &pb.VolumeRegisterResponse{Volume: redactVolume(stored), Warnings: warnings, Meta: &pb.WriteMeta{Index: idx}}, nil
}

// Create creates the volume with a healthy controller of its plugin and
// registers what the plugin answers (external ID, capacity, context,
// topology). A volume registered under the ID already is not created
// again: answered as it is, unchanged, when it is what the create asks
// for (CreateVolume is idempotent by name, and so is this), refused with
// ErrVolumeExists naming each field that differs otherwise, and with
// fsm.ErrVolumeDeleting while its plugin deletes it. The register
// is a create (if_absent): a create of the ID that registered during the
// plugin's call is answered the same way, never overwritten; one
// deregistered again before it is read leaves the ID free, and the
// register is tried once more (twice lost so, the answer is
// fsm.ErrVolumeChanged, Aborted, naming the plugin's volume left
// unregistered). A plugin
// answering with a volume registered under another ID (a create by the
// same name) is refused by the state machine (fsm.ErrExternalVolumeTaken).
func (e *volumesEndpoint) Create(ctx context.Context, req *pb.VolumeCreateRequest) (*pb.VolumeRegisterResponse, error) {
	v := proto.CloneOf(req.GetVolume())
	if v == nil {
		return nil, fmt.Errorf("volume create: %w: no volume", volumespec.ErrInvalidVolume)
	}
	volumespec.Canonicalize(v)
	if err := volumespec.Validate(v, volumespec.ForCreate); err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	old, err := e.s.State().VolumeByID(nil, v.GetId())
	if err != nil {
		return nil, err
	}
	if old != nil {
		return existingVolume(old, v, "")
	}
	spec := proto.CloneOf(v)
	if err := keepRedactedSecrets(v, nil); err != nil {
		return nil, err
	}
	creq := &csipb.CreateVolumeRequest{
		Name: v.GetName(), VolumeCapabilities: CSICapabilities(v), Parameters: v.GetParameters(), Secrets: v.GetSecrets(),
		AccessibilityRequirements: csiTopologyRequirement(v.GetTopologyRequest()),
	}
	if lo, hi := v.GetRequestedCapacityMinBytes(), v.GetRequestedCapacityMaxBytes(); lo > 0 || hi > 0 {
		creq.CapacityRange = &csipb.CapacityRange{RequiredBytes: lo, LimitBytes: hi}
	}
	switch {
	case v.GetSnapshotId() != "":
		creq.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Snapshot{Snapshot: &csipb.VolumeContentSource_SnapshotSource{SnapshotId: v.GetSnapshotId()}}}
	case v.GetCloneId() != "":
		creq.VolumeContentSource = &csipb.VolumeContentSource{Type: &csipb.VolumeContentSource_Volume{Volume: &csipb.VolumeContentSource_VolumeSource{VolumeId: v.GetCloneId()}}}
	}
	resp, nodeID, err := e.createVolume(ctx, v, creq)
	if err != nil {
		return nil, err
	}
	cv := resp.GetVolume()
	v.ExternalId, v.CapacityBytes = cv.GetVolumeId(), cv.GetCapacityBytes()
	if len(cv.GetVolumeContext()) > 0 {
		ctxMap := maps.Clone(v.GetContext())
		if ctxMap == nil {
			ctxMap = map[string]string{}
		}
		maps.Copy(ctxMap, cv.GetVolumeContext())
		v.Context = ctxMap
	}
	for _, t := range cv.GetAccessibleTopology() {
		v.AccessibleTopology = append(v.AccessibleTopology, &pb.Topology{Segments: t.GetSegments()})
	}
	var out *pb.VolumeRegisterResponse
	for try := 1; ; try++ {
		out, err = e.registerCommand(ctx, &pb.VolumeRegisterCommand{Volume: v, IfAbsent: true}, nil)
		if !errors.Is(err, fsm.ErrVolumeRegistered) {
			break
		}
		// Another create (or a register) of the ID won during the plugin's
		// call.
		if e.lostRace != nil {
			e.lostRace(v.GetId())
		}
		old, rerr := e.s.State().VolumeByID(nil, v.GetId())
		switch {
		case rerr != nil:
			return nil, rerr
		case old != nil:
			return existingVolume(old, spec, v.GetExternalId())
		case try == 2:
			return nil, fmt.Errorf("creating volume %q: plugin %q created volume %q (CreateVolume name %q) on node %s, but volume ID %q was registered "+
				"and deregistered again while it was being registered, twice; the plugin's volume is left unregistered (register it, or create again): %w (%v)",
				v.GetId(), v.GetPluginId(), v.GetExternalId(), v.GetName(), nodeID, v.GetId(), fsm.ErrVolumeChanged, err)
		}
		// Deregistered since it refused this register: the ID is free
		// again, and the plugin's new volume is registered under it.
	}
	if errors.Is(err, fsm.ErrExternalVolumeTaken) {
		return nil, fmt.Errorf("creating volume %q: plugin %q answered CreateVolume (name %q) on node %s with a volume registered under another ID "+
			"(CreateVolume is idempotent by name); nothing was registered and the plugin's volume is left as it is: %w", v.GetId(), v.GetPluginId(), v.GetName(), nodeID, err)
	}
	return out, err
}

// existingVolume is a create's answer when old is registered under the ID
// already: fsm.ErrVolumeDeleting while its plugin deletes it; unchanged
// when it is what spec asks for (and, when the plugin was asked, its
// answer ext is old's volume), ErrVolumeExists naming each difference
// otherwise.
func existingVolume(old, spec *pb.Volume, ext string) (*pb.VolumeRegisterResponse, error) {
	if old.GetDeleting() {
		// Answered unchanged, the volume would then disappear with the
		// delete under way.
		return nil, fmt.Errorf("volume %q (external ID %q): %w by its plugin; nothing was created (create it again once the delete is done)",
			spec.GetId(), old.GetExternalId(), fsm.ErrVolumeDeleting)
	}
	diffs := createDiff(old, spec)
	if ext != "" && ext != old.GetExternalId() {
		diffs = append(diffs, fmt.Sprintf("external_id: registered %q, the plugin answered %q (a volume it created that nothing registers)", old.GetExternalId(), ext))
	}
	if len(diffs) > 0 {
		return nil, fmt.Errorf("volume %q: %w (external ID %q): %s; nothing was created (delete or deregister it first, or create under another ID)",
			spec.GetId(), ErrVolumeExists, old.GetExternalId(), strings.Join(diffs, "; "))
	}
	return &pb.VolumeRegisterResponse{Volume: redactVolume(old), Meta: &pb.WriteMeta{Index: old.GetModifyIndex()}, Unchanged: true}, nil
}

// sameValue reports whether two messages hold the same value, an empty
// one and none alike (proto.Equal tells a nil message from an empty one).
func sameValue[M proto.Message](a, b M) bool {
	if proto.Size(a) == 0 && proto.Size(b) == 0 {
		return true
	}
	return proto.Equal(a, b)
}

// createDiff lists how the volume registered under an ID differs from
// what a create of that ID asks for: each field the create sets that the
// stored volume does not hold as asked. Secrets are not compared (they are
// how the volume is reached, not what it is), and of the context only the
// keys the create sets (the plugin adds its own).
func createDiff(old, v *pb.Volume) []string {
	var d []string
	differ := func(field string, registered, asked any) {
		d = append(d, fmt.Sprintf("%s: registered %v, asked %v", field, registered, asked))
	}
	if old.GetName() != v.GetName() {
		differ("name", strconv.Quote(old.GetName()), strconv.Quote(v.GetName()))
	}
	if old.GetPluginId() != v.GetPluginId() {
		differ("plugin_id", strconv.Quote(old.GetPluginId()), strconv.Quote(v.GetPluginId()))
	}
	if a, b := capabilityList(old.GetCapabilities()), capabilityList(v.GetCapabilities()); a != b {
		differ("capabilities", a, b)
	}
	if !sameValue(old.GetMountOptions(), v.GetMountOptions()) {
		differ("mount_options", mountOptionsText(old.GetMountOptions()), mountOptionsText(v.GetMountOptions()))
	}
	if old.GetRequestedCapacityMinBytes() != v.GetRequestedCapacityMinBytes() {
		differ("capacity_min", old.GetRequestedCapacityMinBytes(), v.GetRequestedCapacityMinBytes())
	}
	if old.GetRequestedCapacityMaxBytes() != v.GetRequestedCapacityMaxBytes() {
		differ("capacity_max", old.GetRequestedCapacityMaxBytes(), v.GetRequestedCapacityMaxBytes())
	}
	if old.GetSnapshotId() != v.GetSnapshotId() {
		differ("snapshot_id", strconv.Quote(old.GetSnapshotId()), strconv.Quote(v.GetSnapshotId()))
	}
	if old.GetCloneId() != v.GetCloneId() {
		differ("clone_id", strconv.Quote(old.GetCloneId()), strconv.Quote(v.GetCloneId()))
	}
	if !sameValue(old.GetTopologyRequest(), v.GetTopologyRequest()) {
		differ("topology_request", old.GetTopologyRequest(), v.GetTopologyRequest())
	}
	if !maps.Equal(old.GetParameters(), v.GetParameters()) {
		differ("parameters", old.GetParameters(), v.GetParameters())
	}
	for _, k := range slices.Sorted(maps.Keys(v.GetContext())) {
		if got, ok := old.GetContext()[k]; !ok || got != v.GetContext()[k] {
			differ(fmt.Sprintf("context[%q]", k), strconv.Quote(got), strconv.Quote(v.GetContext()[k]))
		}
	}
	return d
}

// capabilityList renders capabilities as the volume spec words them
// ("single-node-writer/file-system, ..."), in order: the first is the one
// a claim naming no mode takes.
func capabilityList(caps []*pb.VolumeCapability) string {
	words := make([]string, 0, len(caps))
	for _, c := range caps {
		attach := "file-system"
		if c.GetAttachmentMode() == pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE {
			attach = "block-device"
		}
		words = append(words, pb.EnumWord(c.GetAccessMode())+"/"+attach)
	}
	return "[" + strings.Join(words, ", ") + "]"
}

// mountOptionsText renders mount options for createDiff's messages.
func mountOptionsText(m *pb.MountOptions) string {
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("fs_type %q, mount_flags %q", m.GetFsType(), m.GetMountFlags())
}

// Delete deletes the volume with its plugin, then deregisters it. A volume
// with claims is refused, naming them; the plugin not knowing the volume
// (NotFound) is success.
//
// The plugin's call takes seconds, so the check for claims cannot be a
// read before it: the volume is first marked deleting through raft
// (VolumeDeleting, refused in its apply while a claim is held), and from
// that apply on no claim is reserved on it. A definite failure of the
// plugin clears the mark; an uncertain one (the volume may be gone) keeps
// it, and the volume takes no claim until a delete completes or it is
// deregistered.
func (e *volumesEndpoint) Delete(ctx context.Context, req *pb.VolumeDeleteRequest) (*pb.VolumeDeleteResponse, error) {
	v, err := e.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := e.refuseClaimed(v.GetId()); err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	c, nodeID, _, err := e.controller(v.GetPluginId(), volumeloops.CapCreateDelete)
	if errors.Is(err, ErrPluginCannot) {
		return nil, fmt.Errorf("deleting volume %q: %w; deregister it instead", v.GetId(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("deleting volume %q: %w", v.GetId(), err)
	}
	secrets := req.GetSecrets()
	if len(secrets) == 0 {
		secrets = v.GetSecrets()
	}
	if err := e.markDeleting(ctx, v.GetId(), true); err != nil {
		return nil, fmt.Errorf("deleting volume %q: %w", v.GetId(), err)
	}
	if _, err := c.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: v.GetExternalId(), Secrets: secrets}); err != nil {
		err = fmt.Errorf("deleting volume %q with plugin %q on node %s: %w", v.GetId(), v.GetPluginId(), nodeID, err)
		if csi.IsUncertain(err) {
			return nil, fmt.Errorf("%w; the plugin may have deleted it, so it stays marked deleting and takes no claim: run delete again, or deregister it", err)
		}
		// The plugin refused for good: the volume is there, usable again.
		clear, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := e.markDeleting(clear, v.GetId(), false); cerr != nil {
			return nil, fmt.Errorf("%w; clearing its deleting mark failed too (%v): it takes no claim until a delete completes or it is deregistered", err, cerr)
		}
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: v.GetId()})
	if err != nil {
		return nil, fmt.Errorf("volume %q was deleted by its plugin but deregistering it failed: %w; it stays marked deleting and takes no claim: run delete again to finish (the plugin answers it is gone)", v.GetId(), err)
	}
	return &pb.VolumeDeleteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// markDeleting sets or clears the volume's deleting mark through raft.
func (e *volumesEndpoint) markDeleting(ctx context.Context, id string, deleting bool) error {
	_, err := e.s.Apply(ctx, fsm.VolumeDeleting, &pb.VolumeDeletingCommand{
		VolumeId: id, Deleting: deleting, UpdatedAt: e.s.Clock.Now().UnixNano()})
	return err
}

// Deregister forgets a volume without a plugin call: refused with claims,
// or with force while a claimant may still use the volume (the state
// machine's rule, fsm's claimantTerminal, naming the claims).
func (e *volumesEndpoint) Deregister(ctx context.Context, req *pb.VolumeDeregisterRequest) (*pb.VolumeDeleteResponse, error) {
	v, err := e.volume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := e.requireVersion(); err != nil {
		return nil, err
	}
	idx, err := e.s.Apply(ctx, fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: v.GetId(), Force: req.GetForce()})
	if err != nil {
		return nil, fmt.Errorf("deregistering volume %q: %w", v.GetId(), err)
	}
	return &pb.VolumeDeleteResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// volume reads a volume from this server's state; NotFound names it.
func (e *volumesEndpoint) volume(id string) (*pb.Volume, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: volume_id is required", volumespec.ErrInvalidVolume)
	}
	v, err := e.s.State().VolumeByID(nil, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("volume %q: %w", id, fsm.ErrVolumeNotFound)
	}
	return v, nil
}

// refuseClaimed refuses an operation on a volume that has claims.
func (e *volumesEndpoint) refuseClaimed(id string) error {
	claims, err := e.s.State().ClaimsByVolume(nil, id)
	if err != nil || len(claims) == 0 {
		return err
	}
	var names []string
	for i, c := range claims {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(claims)-5))
			break
		}
		names = append(names, fmt.Sprintf("%s on node %s (%s)", rules.Claimant(c), c.GetNodeId(), pb.EnumWord(c.GetState())))
	}
	return fmt.Errorf("volume %q: %w: claimed by %s", id, fsm.ErrVolumeInUse, strings.Join(names, ", "))
}

// keepRedactedSecrets puts back in v the stored value of every secret v
// carries as the redaction marker: an operator who registers again what a
// read showed (the secrets as "[REDACTED]") means to keep them, and the
// marker must never reach a plugin as a credential. A marker with no
// stored value to keep (a new volume, a new key) is refused, naming the
// key.
func keepRedactedSecrets(v, stored *pb.Volume) error {
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(v.GetSecrets())) {
		if v.Secrets[k] != csi.Redacted {
			continue
		}
		old, ok := stored.GetSecrets()[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		v.Secrets[k] = old
	}
	if len(missing) > 0 {
		return fmt.Errorf("volume %q: %w: secrets %s are %q, as reads show them, but the volume has no stored value to keep for them; give their values",
			v.GetId(), volumespec.ErrInvalidVolume, strings.Join(missing, ", "), csi.Redacted)
	}
	return nil
}

// redactVolume is v with its secrets' values replaced, for every answer.
func redactVolume(v *pb.Volume) *pb.Volume {
	if len(v.GetSecrets()) == 0 {
		return v
	}
	v = proto.CloneOf(v)
	for k := range v.Secrets {
		v.Secrets[k] = csi.Redacted
	}
	return v
}

// CSICapabilities are the volume's capabilities as CSI's, each with the
// volume's mount options when it is a file system.
func CSICapabilities(v *pb.Volume) []*csipb.VolumeCapability {
	var out []*csipb.VolumeCapability
	for _, c := range v.GetCapabilities() {
		out = append(out, rules.CSICapability(c.GetAccessMode(), c.GetAttachmentMode(), v.GetMountOptions()))
	}
	return out
}

func csiTopologyRequirement(tr *pb.TopologyRequest) *csipb.TopologyRequirement {
	if len(tr.GetRequired()) == 0 && len(tr.GetPreferred()) == 0 {
		return nil
	}
	out := &csipb.TopologyRequirement{}
	for _, t := range tr.GetRequired() {
		out.Requisite = append(out.Requisite, &csipb.Topology{Segments: t.GetSegments()})
	}
	for _, t := range tr.GetPreferred() {
		out.Preferred = append(out.Preferred, &csipb.Topology{Segments: t.GetSegments()})
	}
	return out
}

// volumesIndex is the index of the last change to volumes, claims or
// attachments: what a volume view reads.
func volumesIndex(st *fsm.StateSnapshot) (uint64, error) {
	var out uint64
	for _, t := range []string{fsm.TableVolumes, fsm.TableClaims, fsm.TableAttachments} {
		i, err := st.Index(t)
		if err != nil {
			return 0, err
		}
		out = max(out, i)
	}
	return out, nil
}

// view reads a volume's claims and attachments beside it, redacted.
func view(ws memdb.WatchSet, st *fsm.StateSnapshot, v *pb.Volume) (*pb.VolumeView, error) {
	claims, err := st.ClaimsByVolume(ws, v.GetId())
	if err != nil {
		return nil, err
	}
	atts, err := st.AttachmentsByVolume(ws, v.GetId())
	if err != nil {
		return nil, err
	}
	return &pb.VolumeView{Volume: redactVolume(v), Claims: claims, Attachments: atts}, nil
}
