package pb_test

import (
	"testing"

	"berth.dev/berth/rpc/pb"
)

// TestEnumWord pins the spelling every caller shares: the enum's prefix
// off, lowercase, "-" for "_", and a number for a value this version does
// not declare.
func TestEnumWord(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{pb.EnumWord(pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER), "single-node-writer"},
		{pb.EnumWord(pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE), "block-device"},
		{pb.EnumWord(pb.ClaimState_CLAIM_STATE_NODE_DETACHED), "node-detached"},
		{pb.EnumWord(pb.ClaimMode_CLAIM_MODE_WRITE), "write"},
		{pb.EnumWord(pb.AttachmentState_ATTACHMENT_STATE_DETACHING), "detaching"},
		{pb.EnumWord(pb.NodeStatus_NODE_STATUS_READY), "ready"},
		{pb.EnumWord(pb.NodeStatus_NODE_STATUS_UNSPECIFIED), "unspecified"},
		{pb.EnumWord(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE), "node"},
		{pb.EnumWord(pb.NodeStatus(7)), "7"},
	} {
		if tc.got != tc.want {
			t.Errorf("EnumWord = %q, want %q", tc.got, tc.want)
		}
	}
	if _, ok := pb.EnumValueWord(pb.NodeStatus(0).Descriptor(), 7); ok {
		t.Error("EnumValueWord of an undeclared number: ok")
	}
}
