package volumespec

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/pb"
)

// accessModes are the seven CSI access modes by the words Nomad's volume
// specification uses (also the API's JSON words).
var accessModes = map[string]pb.VolumeAccessMode{
	"single-node-reader-only":   pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY,
	"single-node-writer":        pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
	"single-node-single-writer": pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER,
	"single-node-multi-writer":  pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER,
	"multi-node-reader-only":    pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY,
	"multi-node-single-writer":  pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER,
	"multi-node-multi-writer":   pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER,
}

var attachmentModes = map[string]pb.VolumeAttachmentMode{
	"block-device": pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE,
	"file-system":  pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
}

func words[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for w := range m {
		out = append(out, w)
	}
	return out
}

// didYouMean is "; did you mean %q?" for the closest word, or "".
func didYouMean(s string, candidates []string) string {
	if w := hclsrc.Suggest(s, candidates); w != "" {
		return fmt.Sprintf("; did you mean %q?", w)
	}
	return ""
}

// MaxIDLength bounds a volume ID: it is part of API paths, host paths on
// the nodes and every message about the volume.
const MaxIDLength = 128

// checkID refuses an ID that cannot be a path segment: empty, too long,
// with a slash, white space or a control character.
func checkID(id string) string {
	switch {
	case id == "":
		return "is required"
	case len(id) > MaxIDLength:
		return fmt.Sprintf("is %d bytes, over the %d allowed", len(id), MaxIDLength)
	case id == "." || id == "..":
		return fmt.Sprintf("%q cannot be a volume ID", id)
	}
	for _, r := range id {
		if r == '/' || r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Sprintf("%q holds %q: a volume ID is one path segment (letters, digits, - _ . [ ] and the like)", id, r)
		}
	}
	return ""
}

// Mode is what a volume is being checked for.
type Mode int

const (
	// ForRegister: a volume the provider already has (external_id).
	ForRegister Mode = iota
	// ForCreate: a volume the plugin is to create (capacity, snapshot or
	// clone source; no external_id).
	ForCreate
)

// Validate checks a volume sent for register or create, as Parse does for
// a file but without positions: every problem at once as *Errors, paths
// as the spec's keys (capability[0].access_mode). It does not change v;
// Canonicalize fills the name.
func Validate(v *pb.Volume, mode Mode) error {
	es := &Errors{Volume: v.GetId()}
	validate(v, mode, func(path, format string, args ...any) {
		es.Errs.Add(Pos{}, path, ErrInvalidVolume, format, args...)
	})
	return es.err()
}

// Canonicalize fills what a volume from the API may leave out: its name
// (the ID).
func Canonicalize(v *pb.Volume) {
	if v.GetName() == "" {
		v.Name = v.GetId()
	}
}

// validate reports each problem of v through bad(path, msg).
func validate(v *pb.Volume, mode Mode, bad func(path, format string, args ...any)) {
	if v == nil {
		bad("", "no volume")
		return
	}
	if why := checkID(v.GetId()); why != "" {
		bad("id", "%s", why)
	}
	if v.GetPluginId() == "" {
		bad("plugin_id", "is required: the CSI plugin that serves the volume")
	}
	switch mode {
	case ForRegister:
		if v.GetExternalId() == "" {
			bad("external_id", "is required to register a volume: the provider's ID of it (or create the volume instead)")
		}
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"capacity_min", v.GetRequestedCapacityMinBytes() != 0},
			{"capacity_max", v.GetRequestedCapacityMaxBytes() != 0},
			{"snapshot_id", v.GetSnapshotId() != ""},
			{"clone_id", v.GetCloneId() != ""},
		} {
			if f.set {
				bad(f.name, "is for volume create; a registered volume exists already")
			}
		}
	case ForCreate:
		if v.GetExternalId() != "" {
			bad("external_id", "is set by the plugin when it creates the volume; register a volume that exists")
		}
		if v.GetSnapshotId() != "" && v.GetCloneId() != "" {
			bad("clone_id", "a volume is created from a snapshot_id or a clone_id, not both")
		}
	}
	lo, hi := v.GetRequestedCapacityMinBytes(), v.GetRequestedCapacityMaxBytes()
	switch {
	case lo < 0:
		bad("capacity_min", "must not be negative")
	case hi < 0:
		bad("capacity_max", "must not be negative")
	case hi > 0 && lo > hi:
		bad("capacity_min", "%d bytes is over capacity_max (%d bytes)", lo, hi)
	}
	if len(v.GetCapabilities()) == 0 {
		bad("capability", "at least one capability { access_mode attachment_mode } is required")
	}
	fileSystem := false
	seen := map[string]int{}
	for i, c := range v.GetCapabilities() {
		p := fmt.Sprintf("capability[%d]", i)
		if c.GetAccessMode() == pb.VolumeAccessMode_VOLUME_ACCESS_MODE_UNSPECIFIED {
			bad(p+".access_mode", "is required (one of %s)", strings.Join(sortedWords(accessModes), ", "))
		} else if _, ok := pb.VolumeAccessMode_name[int32(c.GetAccessMode())]; !ok {
			bad(p+".access_mode", "unknown access mode %d", c.GetAccessMode())
		}
		switch c.GetAttachmentMode() {
		case pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_UNSPECIFIED:
			bad(p+".attachment_mode", `is required ("file-system" or "block-device")`)
		case pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM:
			fileSystem = true
		case pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE:
		default:
			bad(p+".attachment_mode", "unknown attachment mode %d", c.GetAttachmentMode())
		}
		key := c.GetAccessMode().String() + "/" + c.GetAttachmentMode().String()
		if j, ok := seen[key]; ok {
			bad(p, "repeats capability[%d]", j)
		}
		seen[key] = i
	}
	if mo := v.GetMountOptions(); mo != nil && (mo.GetFsType() != "" || len(mo.GetMountFlags()) > 0) && !fileSystem && len(v.GetCapabilities()) > 0 {
		bad("mount_options", `apply to "file-system" attachments; every capability is "block-device"`)
	}
	if tr := v.GetTopologyRequest(); tr != nil {
		for i, t := range tr.GetRequired() {
			if len(t.GetSegments()) == 0 {
				bad(fmt.Sprintf("topology_request.required.topology[%d].segments", i), "a topology needs at least one segment")
			}
		}
		for i, t := range tr.GetPreferred() {
			if len(t.GetSegments()) == 0 {
				bad(fmt.Sprintf("topology_request.preferred.topology[%d].segments", i), "a topology needs at least one segment")
			}
		}
	}
	// What the servers set: a volume sent with them would claim a state
	// the plugin never reported.
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"provider", v.GetProvider() != ""},
		{"provider_version", v.GetProviderVersion() != ""},
		{"capacity_bytes", v.GetCapacityBytes() != 0},
		{"node_expansion_pending_bytes", v.GetNodeExpansionPendingBytes() != 0},
		{"accessible_topology", len(v.GetAccessibleTopology()) > 0},
		{"schedulable", v.GetSchedulable()},
		{"controller_required", v.GetControllerRequired()},
		{"deleting", v.GetDeleting()},
		{"created_at", v.GetCreatedAt() != 0},
		{"modified_at", v.GetModifiedAt() != 0},
		{"create_index", v.GetCreateIndex() != 0},
		{"modify_index", v.GetModifyIndex() != 0},
	} {
		if f.set {
			bad(f.name, "is set by the servers, not in a volume specification")
		}
	}
}

func sortedWords[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
