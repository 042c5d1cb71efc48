package rules_test

import (
	"testing"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// TestEnumWord pins the spelling every caller shares: the enum's prefix
// off, lowercase, "-" for "_", and a number for a value this version does
// not declare.
func TestEnumWord(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{rules.EnumWord(pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER), "single-node-writer"},
		{rules.EnumWord(pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE), "block-device"},
		{rules.EnumWord(pb.ClaimState_CLAIM_STATE_NODE_DETACHED), "node-detached"},
		{rules.EnumWord(pb.ClaimMode_CLAIM_MODE_WRITE), "write"},
		{rules.EnumWord(pb.AttachmentState_ATTACHMENT_STATE_DETACHING), "detaching"},
		{rules.EnumWord(pb.NodeStatus_NODE_STATUS_READY), "ready"},
		{rules.EnumWord(pb.NodeStatus_NODE_STATUS_UNSPECIFIED), "unspecified"},
		{rules.EnumWord(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE), "node"},
		{rules.EnumWord(pb.NodeStatus(7)), "7"},
	} {
		if tc.got != tc.want {
			t.Errorf("EnumWord = %q, want %q", tc.got, tc.want)
		}
	}
	if _, ok := rules.EnumValueWord(pb.NodeStatus(0).Descriptor(), 7); ok {
		t.Error("EnumValueWord of an undeclared number: ok")
	}
}
