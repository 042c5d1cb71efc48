package rules

import (
	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/rpc/pb"
)

// CSICapability is the CSI form of a berth volume capability (a claim's,
// or one a volume offers): berth's access modes are numbered as CSI's; a
// block device has no mount, a file system carries mount's file system
// type and flags (nil: none). The controller publish, the node stage and
// publish, and a volume's create and validate must all send the same one.
func CSICapability(access pb.VolumeAccessMode, attach pb.VolumeAttachmentMode, mount *pb.MountOptions) *csipb.VolumeCapability {
	out := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_Mode(access)}}
	if attach == pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE {
		out.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
		return out
	}
	out.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{
		FsType: mount.GetFsType(), MountFlags: mount.GetMountFlags(),
	}}
	return out
}
