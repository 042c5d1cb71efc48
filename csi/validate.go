package csi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
)

// Validation is the outcome of ValidateVolumeCapabilities.
type Validation struct {
	// Confirmed is true when the plugin confirmed the request and what it
	// confirmed matches what was asked.
	Confirmed bool
	// Message is the plugin's explanation when it did not confirm.
	Message string
}

// ValidateVolumeCapabilities asks the plugin whether a volume supports the
// requested capabilities, context and parameters.
//
// A response without `confirmed` is the plugin's answer "no", not a failure:
// the result is Confirmed false with the plugin's message. A response with
// `confirmed` is compared with the request, because a plugin built against an
// older spec drops fields it does not know (a capability's newer mount
// option, mutable_parameters) and confirms a request it never understood.
// Such a mismatch fails with ErrInvalidResponse naming what differs:
//   - volume_capabilities must be echoed exactly: every requested capability
//     confirmed, none that was not requested;
//   - mutable_parameters, when requested, must be echoed equal, since they
//     came after most plugins were written;
//   - volume_context and parameters, when echoed, must equal the request;
//     the spec makes echoing them optional and many plugins omit them.
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
	conf := resp.GetConfirmed()
	if conf == nil {
		return &Validation{Message: scrubSecrets(resp.GetMessage(), req)}, nil
	}
	if diffs := confirmationDiff(req, conf); len(diffs) > 0 {
		return nil, invalidResponse(CallValidateVolumeCapabilities, id,
			"plugin confirmed something other than was asked: %s", strings.Join(diffs, "; "))
	}
	return &Validation{Confirmed: true}, nil
}

// confirmationDiff describes each way conf differs from what req asked.
func confirmationDiff(req *csipb.ValidateVolumeCapabilitiesRequest, conf *csipb.ValidateVolumeCapabilitiesResponse_Confirmed) []string {
	var diffs []string
	unmatched := slices.Clone(conf.GetVolumeCapabilities())
	for _, want := range req.GetVolumeCapabilities() {
		i := slices.IndexFunc(unmatched, func(got *csipb.VolumeCapability) bool { return proto.Equal(want, got) })
		if i < 0 {
			diffs = append(diffs, "volume capability "+describeCapability(want)+" not confirmed")
			continue
		}
		unmatched = slices.Delete(unmatched, i, i+1)
	}
	for _, extra := range unmatched {
		diffs = append(diffs, "volume capability "+describeCapability(extra)+" confirmed but not requested")
	}
	if d := mapDiff("mutable_parameters", req.GetMutableParameters(), conf.GetMutableParameters(), true); d != "" {
		diffs = append(diffs, d)
	}
	if d := mapDiff("volume_context", req.GetVolumeContext(), conf.GetVolumeContext(), false); d != "" {
		diffs = append(diffs, d)
	}
	if d := mapDiff("parameters", req.GetParameters(), conf.GetParameters(), false); d != "" {
		diffs = append(diffs, d)
	}
	return diffs
}

// mapDiff compares a requested map with its echo. An empty echo is accepted
// unless mustEcho is set and something was requested.
func mapDiff(name string, want, got map[string]string, mustEcho bool) string {
	switch {
	case len(got) == 0 && len(want) == 0:
		return ""
	case len(got) == 0 && !mustEcho:
		return ""
	case len(got) == 0:
		return name + " requested but not confirmed (plugin may predate them)"
	case maps.Equal(want, got):
		return ""
	}
	var keys []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			keys = append(keys, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return fmt.Sprintf("%s confirmed differ from the request in %s", name, strings.Join(keys, ", "))
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
