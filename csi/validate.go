package csi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
)

// ErrConfirmationMismatch is returned, wrapped in an *Error whose code is
// FailedPrecondition, by ValidateVolumeCapabilities when the plugin
// confirms (sets `confirmed`) but its confirmation drops or changes a field
// berth sent: a plugin built against an older spec confirms a request it
// never understood. The message names each such field. Final: the same
// plugin answers the same.
var ErrConfirmationMismatch = errcode.New(codes.FailedPrecondition, "the csi plugin's confirmation differs from the request")

// Validation is the outcome of ValidateVolumeCapabilities.
type Validation struct {
	// Confirmed is true when the plugin set `confirmed` and it holds every
	// field berth sent, as sent. False when the plugin answered without
	// `confirmed`: it validated nothing it is sure of.
	Confirmed bool
	// Message is the plugin's message, secrets removed; unconfirmed, it is
	// all the plugin said, and the caller shows it as a warning.
	Message string
	// Notes name what a confirmation left out that berth accepts, for
	// the caller to show as warnings: a capability confirmed by its access
	// mode alone, without an access type (Nomad accepts these too), whose
	// mount's fs_type and mount_flags were then not checked.
	Notes []string
}

// ValidateVolumeCapabilities asks the plugin whether a volume supports the
// requested capabilities, context and parameters.
//
// A response without `confirmed`, or with an empty one, is no failure:
// plugins answer "valid" that way (Azure's and Linode's do, with a message
// or none), and the spec lets `message` say why it is not (`confirmed`
// SHALL only be non-empty when the validation succeeded). The result is
// Confirmed false with the plugin's message, for the caller to accept and
// show as a warning.
//
// A response with `confirmed` is compared with the request, field by field,
// for the fields berth sent only, because a plugin built against an older
// spec drops fields it does not know (a mount's volume_mount_group,
// mutable_parameters) and confirms a request it never understood. A field
// sent and dropped or changed fails with ErrConfirmationMismatch
// (FailedPrecondition) naming it and carrying the plugin's message:
//   - every requested capability must be confirmed by one that has its
//     access mode, no other access type (block for mount, or the reverse)
//     and, of a mount, the fs_type, each mount flag (in any order) and
//     the volume_mount_group that were sent; what the plugin adds (a
//     default fs_type, a mount flag, a capability not asked for) is not
//     berth's to judge. A capability confirmed without an access type is
//     accepted with a note (Validation.Notes): access types are in CSI
//     since 1.0, and plugins confirm by access mode alone (Nomad took
//     these too, hashicorp/nomad#9021); but not when a volume_mount_group
//     was sent, which came after 1.0 and so may have been dropped;
//   - mutable_parameters, when sent, must be echoed, since they came after
//     most plugins were written;
//   - volume_context and parameters, when echoed, must hold every key sent
//     with its value; echoing them is optional in the spec and many
//     plugins omit them.
func (c *ControllerClient) ValidateVolumeCapabilities(ctx context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*Validation, error) {
	id := req.GetVolumeId()
	if err := required(CallValidateVolumeCapabilities, id,
		field{"volume_id", id != ""},
		field{"volume_capabilities", len(req.GetVolumeCapabilities()) > 0}); err != nil {
		return nil, err
	}
	resp, err := invoke(ctx, c.c, CallValidateVolumeCapabilities, id, req, c.rpc.ValidateVolumeCapabilities)
	if err != nil {
		return nil, err
	}
	msg := scrubSecrets(resp.GetMessage(), req)
	conf := resp.GetConfirmed()
	if conf == nil || proto.Size(conf) == 0 {
		return &Validation{Message: msg}, nil
	}
	diffs, notes := confirmationDiff(req, conf)
	if len(diffs) > 0 {
		said := "it gave no message"
		if msg != "" {
			said = fmt.Sprintf("its message: %q", msg)
		}
		return nil, &Error{Call: CallValidateVolumeCapabilities, VolumeID: id, Code: codes.FailedPrecondition,
			Err: fmt.Errorf("%w: %s (%s)", ErrConfirmationMismatch, scrubSecrets(strings.Join(diffs, "; "), req), said)}
	}
	return &Validation{Confirmed: true, Message: msg, Notes: notes}, nil
}

// confirmationDiff describes each field berth sent that conf drops or
// changes, and notes what it left out that is accepted.
func confirmationDiff(req *csipb.ValidateVolumeCapabilitiesRequest, conf *csipb.ValidateVolumeCapabilitiesResponse_Confirmed) (diffs, notes []string) {
	for i, want := range req.GetVolumeCapabilities() {
		d, note := capabilityDiff(fmt.Sprintf("volume_capabilities[%d]", i), want, conf.GetVolumeCapabilities())
		if d != "" {
			diffs = append(diffs, d)
		}
		if note != "" {
			notes = append(notes, note)
		}
	}
	diffs = append(diffs, mapDiff("mutable_parameters", req.GetMutableParameters(), conf.GetMutableParameters(), true)...)
	diffs = append(diffs, mapDiff("volume_context", req.GetVolumeContext(), conf.GetVolumeContext(), false)...)
	diffs = append(diffs, mapDiff("parameters", req.GetParameters(), conf.GetParameters(), false)...)
	return diffs, notes
}

// capabilityDiff is "" when one of got confirms want (every field sent, as
// sent), else what the closest of them drops or changes, the fields named
// from path. One that confirms want without an access type does, with a
// note, when no other confirms it fully.
func capabilityDiff(path string, want *csipb.VolumeCapability, got []*csipb.VolumeCapability) (diff, note string) {
	var best []string
	for _, g := range got {
		d := capabilityFields(path, want, g)
		switch {
		case len(d) > 0:
			if best == nil || len(d) < len(best) {
				best = d
			}
		case g.GetAccessType() == nil && want.GetAccessType() != nil:
			note = fmt.Sprintf("%s (%s): confirmed by its access mode alone, without an access type, so its %s was not checked",
				path, describeCapability(want), accessType(want))
		default:
			return "", ""
		}
	}
	switch {
	case note != "":
		return "", note
	case best == nil:
		return fmt.Sprintf("%s (%s): not confirmed (the plugin confirmed no capability)", path, describeCapability(want)), ""
	}
	return fmt.Sprintf("%s (%s): %s", path, describeCapability(want), strings.Join(best, ", ")), ""
}

// capabilityFields lists each field sent in want that got does not hold
// as sent. An access type got leaves out is no difference (capabilityDiff
// notes it), unless want's mount has a volume_mount_group: newer than
// CSI 1.0, it may be what an older plugin dropped.
func capabilityFields(path string, want, got *csipb.VolumeCapability) []string {
	var d []string
	if w, g := want.GetAccessMode().GetMode(), got.GetAccessMode().GetMode(); w != g {
		d = append(d, fieldDiff(path+".access_mode.mode", w.String(), g.String(), g == csipb.VolumeCapability_AccessMode_UNKNOWN))
	}
	if got.GetAccessType() == nil {
		if vmg := want.GetMount().GetVolumeMountGroup(); vmg != "" {
			d = append(d, fieldDiff(path+".mount.volume_mount_group", vmg, "", true))
		}
		return d
	}
	switch {
	case want.GetBlock() != nil:
		if got.GetBlock() == nil {
			d = append(d, fieldDiff(path+".block", "block", accessType(got), false))
		}
	case want.GetMount() != nil:
		w, g := want.GetMount(), got.GetMount()
		if g == nil {
			return append(d, fieldDiff(path+".mount", "mount", accessType(got), false))
		}
		if w.GetFsType() != "" && w.GetFsType() != g.GetFsType() {
			d = append(d, fieldDiff(path+".mount.fs_type", w.GetFsType(), g.GetFsType(), g.GetFsType() == ""))
		}
		if missing := missingFlags(w.GetMountFlags(), g.GetMountFlags()); len(missing) > 0 {
			d = append(d, fmt.Sprintf("field %s sent as %q, confirmed as %q: %s dropped", path+".mount.mount_flags",
				strings.Join(w.GetMountFlags(), ","), strings.Join(g.GetMountFlags(), ","), strings.Join(missing, ",")))
		}
		if w.GetVolumeMountGroup() != "" && w.GetVolumeMountGroup() != g.GetVolumeMountGroup() {
			d = append(d, fieldDiff(path+".mount.volume_mount_group", w.GetVolumeMountGroup(), g.GetVolumeMountGroup(), g.GetVolumeMountGroup() == ""))
		}
	}
	return d
}

// fieldDiff words one field sent that the confirmation dropped or changed.
func fieldDiff(field, sent, got string, dropped bool) string {
	if dropped {
		return fmt.Sprintf("field %s sent as %q, dropped from the confirmation (a plugin older than the field?)", field, sent)
	}
	return fmt.Sprintf("field %s sent as %q, confirmed as %q", field, sent, got)
}

// accessType names a capability's access type.
func accessType(c *csipb.VolumeCapability) string {
	switch {
	case c.GetBlock() != nil:
		return "block"
	case c.GetMount() != nil:
		return "mount"
	}
	return ""
}

// missingFlags returns the mount flags sent that got does not hold (in
// any order); flags the plugin adds are not berth's to judge.
func missingFlags(sent, got []string) []string {
	var out []string
	for _, f := range sent {
		if !slices.Contains(got, f) {
			out = append(out, f)
		}
	}
	return out
}

// mapDiff lists each key of a sent map that its echo drops or changes. An
// empty echo is accepted unless mustEcho is set and something was sent;
// keys the echo adds are not compared.
func mapDiff(name string, want, got map[string]string, mustEcho bool) []string {
	switch {
	case len(want) == 0:
		return nil
	case len(got) == 0 && !mustEcho:
		return nil
	case len(got) == 0:
		return []string{fmt.Sprintf("field %s sent (%s), dropped from the confirmation (a plugin older than the field?)",
			name, strings.Join(slices.Sorted(maps.Keys(want)), ", "))}
	}
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("field %s[%q] sent, dropped from the confirmation", name, k))
		case g != want[k]:
			d = append(d, fmt.Sprintf("field %s[%q] sent as %q, confirmed as %q", name, k, want[k], g))
		}
	}
	return d
}

// describeCapability renders a capability for an error message, field by
// field, so that the part a plugin dropped is visible.
func describeCapability(c *csipb.VolumeCapability) string {
	var b strings.Builder
	switch {
	case c.GetBlock() != nil:
		b.WriteString("block")
	case c.GetMount() != nil:
		m := c.GetMount()
		b.WriteString("mount(fs_type=" + m.GetFsType())
		if len(m.GetMountFlags()) > 0 {
			b.WriteString(" mount_flags=" + strings.Join(m.GetMountFlags(), ","))
		}
		if m.GetVolumeMountGroup() != "" {
			b.WriteString(" volume_mount_group=" + m.GetVolumeMountGroup())
		}
		b.WriteString(")")
	default:
		b.WriteString("no-access-type")
	}
	b.WriteString(" " + c.GetAccessMode().GetMode().String())
	return b.String()
}
