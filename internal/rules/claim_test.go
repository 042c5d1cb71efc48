package rules_test

import (
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

const (
	snw = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER
	fs  = pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
)

// TestCheckClaim pins the limits of every access mode as the scheduler
// reads them: held claims (on node n1 unless said) and a new one.
func TestCheckClaim(t *testing.T) {
	held := func(id, node string, mode pb.ClaimMode, access pb.VolumeAccessMode) *pb.Claim {
		return &pb.Claim{Id: id, AllocId: "a-" + id, NodeId: node, Mode: mode, AccessMode: access, AttachmentMode: fs,
			State: pb.ClaimState_CLAIM_STATE_IN_USE}
	}
	const (
		r = pb.ClaimMode_CLAIM_MODE_READ
		w = pb.ClaimMode_CLAIM_MODE_WRITE
	)
	for _, tc := range []struct {
		access  pb.VolumeAccessMode
		held    [][2]string // mode, node
		mode    pb.ClaimMode
		node    string
		wantErr error
	}{
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY, [][2]string{{"r", "n1"}, {"r", "n1"}}, r, "n1", nil},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY, [][2]string{{"r", "n1"}}, r, "n2", rules.ErrNoFreeClaim},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY, nil, w, "n1", rules.ErrClaimCapability},
		{snw, [][2]string{{"w", "n1"}, {"r", "n1"}}, r, "n1", nil},
		{snw, [][2]string{{"w", "n1"}}, w, "n1", rules.ErrNoFreeClaim},
		{snw, [][2]string{{"r", "n1"}}, r, "n2", rules.ErrNoFreeClaim},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER, nil, w, "n1", nil},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER, [][2]string{{"r", "n1"}}, r, "n1", rules.ErrNoFreeClaim},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER, [][2]string{{"w", "n1"}, {"w", "n1"}}, w, "n1", nil},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER, [][2]string{{"w", "n1"}}, w, "n2", rules.ErrNoFreeClaim},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, [][2]string{{"r", "n1"}, {"r", "n2"}}, r, "n3", nil},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, nil, w, "n1", rules.ErrClaimCapability},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER, [][2]string{{"w", "n1"}, {"r", "n2"}}, r, "n3", nil},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER, [][2]string{{"w", "n1"}}, w, "n2", rules.ErrNoFreeClaim},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER, [][2]string{{"w", "n1"}, {"w", "n2"}}, w, "n3", nil},
	} {
		v := &pb.Volume{Id: "v", Capabilities: []*pb.VolumeCapability{{AccessMode: tc.access, AttachmentMode: fs}}}
		var claims []*pb.Claim
		for i, h := range tc.held {
			mode := r
			if h[0] == "w" {
				mode = w
			}
			claims = append(claims, held(string(rune('a'+i)), h[1], mode, tc.access))
		}
		c := &pb.Claim{Id: "new", AllocId: "a-new", NodeId: tc.node, Mode: tc.mode, AccessMode: tc.access, AttachmentMode: fs}
		err := rules.CheckClaim(v, claims, c)
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
			t.Errorf("%s, held %v, new %s on %s: %v, want %v", pb.EnumWord(tc.access), tc.held, tc.mode, tc.node, err, tc.wantErr)
			continue
		}
		if err != nil && (!strings.Contains(err.Error(), `volume "v"`) || !strings.Contains(err.Error(), `alloc "a-new"`) || !strings.Contains(err.Error(), `node "`+tc.node+`"`)) {
			t.Errorf("refusal %q does not name volume, alloc and node", err)
		}
	}
	// Held in another access mode: no free claim in this one.
	v := &pb.Volume{Id: "v", Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: fs},
		{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, AttachmentMode: fs}}}
	err := rules.CheckClaim(v, []*pb.Claim{held("a", "n1", r, snw)},
		&pb.Claim{Id: "new", NodeId: "n1", Mode: r, AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, AttachmentMode: fs})
	if !errors.Is(err, rules.ErrNoFreeClaim) {
		t.Errorf("a claim in another access mode than the held ones: %v, want ErrNoFreeClaim", err)
	}
}
