package apijson_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// goldenDetach is DELETE /v1/volume/csi/{id}/detach's answer: what the
// node did and the claim left node-detached until the controller
// unpublish frees it.
func goldenDetach() *pb.VolumeDetachResponse {
	return &pb.VolumeDetachResponse{
		Node: &pb.CSINodeDetachResponse{PluginId: "aws-ebs0", AllocIds: []string{"0b9f2a51-7d3c-4e8a-b6f1-2c3d4e5f6a70"},
			ClaimIds: []string{"c0ffee00-1111-4222-8333-444455556666"}, Unstaged: true,
			Results: []*pb.CSINodeDetachResult{
				{User: &pb.CSINodeDetachUser{ClaimId: "5d0f6a0e-0000-4f7a-9d2e-3b4c5d6e7f80", AllocId: "0b9f2a51-7d3c-4e8a-b6f1-2c3d4e5f6a70"},
					Outcome: pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_DONE},
				{User: &pb.CSINodeDetachUser{ClaimId: "c0ffee00-1111-4222-8333-444455556666"}, Outcome: pb.CSINodeDetachOutcome_CSI_NODE_DETACH_OUTCOME_NOT_HELD},
			}},
		Claims: []*pb.Claim{{Id: "5d0f6a0e-0000-4f7a-9d2e-3b4c5d6e7f80", VolumeId: "data", AllocId: "0b9f2a51-7d3c-4e8a-b6f1-2c3d4e5f6a70",
			NodeId: "7e1a2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b", Mode: pb.ClaimMode_CLAIM_MODE_WRITE, State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED,
			AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
			CreateIndex: 40, ModifyIndex: 57}},
		Meta: &pb.WriteMeta{Index: 57},
	}
}

// TestGoldenVolumeDetach writes testdata/volume_detach.golden (go test
// -update rewrites it) and reads it back to the same answer.
func TestGoldenVolumeDetach(t *testing.T) {
	got, err := apijson.Marshal(goldenDetach())
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "volume_detach.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
	back := &pb.VolumeDetachResponse{}
	if err := apijson.Unmarshal(want, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, goldenDetach()) {
		t.Fatalf("decoded %v\nwant %v", back, goldenDetach())
	}
	for _, field := range []string{`"alloc_ids": [`, `"claim_ids": [`, `"unstaged": true`, `"state": "node-detached"`, `"plugin_id": "aws-ebs0"`} {
		if !bytes.Contains(want, []byte(field)) {
			t.Errorf("golden detach lacks %s", field)
		}
	}
}
