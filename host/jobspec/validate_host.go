package jobspec

import (
	"slices"

	"berth.dev/berth/rpc/pb"
)

// hostVolume checks a group volume of type "host": source names a host
// volume of the node (a client's host_volume block); what only a CSI
// claim has (per_alloc, mount options) is refused rather than ignored.
func (v *validator) hostVolume(p path, vol *pb.VolumeRequest) {
	if vol.GetSource() == "" {
		v.add(p.f("source"), "required: the name of a host volume of the node (a host_volume block of the client's config)")
	}
	if vol.GetPerAlloc() {
		v.add(p.f("per_alloc"), "applies to CSI volumes only; a host volume is one directory of a node")
	}
	if vol.GetMountOptions() != nil {
		v.add(p.f("mount_options"), "applies to CSI volumes only; a host volume is a directory, mounted as it is")
	}
	// access_mode and attachment_mode choose among a dynamic host
	// volume's capabilities, as for a CSI volume.
	if m := vol.GetAccessMode(); m != "" && !slices.Contains(accessModes, m) {
		v.add(p.f("access_mode"), "unknown access mode %q%s", m, didYouMean(m, accessModes))
	}
	if m := vol.GetAttachmentMode(); m != "" && !slices.Contains(attachmentModes, m) {
		v.add(p.f("attachment_mode"), "unknown attachment mode %q%s", m, didYouMean(m, attachmentModes))
	}
}

// propagationModes are what a volume_mount's propagation_mode accepts.
var propagationModes = []string{"private", "host-to-task", "bidirectional"}

// propagation checks a volume_mount's propagation_mode: one of
// propagationModes, and bidirectional (the task's mounts reach the host)
// only for a mount the task may write.
func (v *validator) propagation(p path, m *pb.VolumeMount, req *pb.VolumeRequest) {
	mode := m.GetPropagationMode()
	switch {
	case mode == "":
	case !slices.Contains(propagationModes, mode):
		v.add(p.f("propagation_mode"), "unknown propagation mode %q%s", mode, didYouMean(mode, propagationModes))
	case mode == "bidirectional" && (m.GetReadOnly() || req.GetReadOnly()):
		v.add(p.f("propagation_mode"), "bidirectional propagation lets the task's mounts reach the host; a read-only mount cannot have it (use host-to-task)")
	}
}
