package rules_test

import (
	"testing"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// TestVolumeID: a per_alloc request claims one volume per alloc index,
// any other the source itself.
func TestVolumeID(t *testing.T) {
	if got := rules.VolumeID(&pb.VolumeRequest{Source: "data"}, 3); got != "data" {
		t.Errorf("VolumeID = %q, want data", got)
	}
	if got := rules.VolumeID(&pb.VolumeRequest{Source: "data", PerAlloc: true}, 3); got != "data[3]" {
		t.Errorf("VolumeID per alloc = %q, want data[3]", got)
	}
}

// TestCSICapability: berth's access modes are CSI's numbers; a block
// device carries no mount, a file system carries the mount options given.
func TestCSICapability(t *testing.T) {
	mount := &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}}
	fsCap := rules.CSICapability(pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY,
		pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM, mount)
	if got := fsCap.GetAccessMode().GetMode().String(); got != "MULTI_NODE_READER_ONLY" {
		t.Errorf("access mode %s, want MULTI_NODE_READER_ONLY", got)
	}
	if m := fsCap.GetMount(); m.GetFsType() != "ext4" || len(m.GetMountFlags()) != 1 || m.GetMountFlags()[0] != "noatime" || fsCap.GetBlock() != nil {
		t.Errorf("file system capability %v, want mount ext4 [noatime]", fsCap)
	}
	block := rules.CSICapability(pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
		pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE, mount)
	if block.GetBlock() == nil || block.GetMount() != nil || block.GetAccessMode().GetMode().String() != "SINGLE_NODE_WRITER" {
		t.Errorf("block capability %v, want a block device, single-node writer, no mount", block)
	}
	if m := rules.CSICapability(pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
		pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM, nil).GetMount(); m == nil || m.GetFsType() != "" {
		t.Errorf("no mount options: mount %v, want an empty mount", m)
	}
}
