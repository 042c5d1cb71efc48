package server

import (
	"slices"
	"testing"
	"time"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// List filters by plugin, by node (a claim or an attachment there) and
// by prefix, pages by ID with a token that stays inside the prefix, and a
// blocking list wakes on a claim change as on a volume change; Get shows
// the claim and the attachment the claim made.
func TestVolumeListFiltersPagesAndBlocks(t *testing.T) {
	_, s, vols, n, _ := volumeCluster(t, csifake.New())
	for _, v := range []*pb.Volume{fsVolume("db-0"), fsVolume("db-1"), fsVolume("db-2"), fsVolume("logs")} {
		if v.GetId() == "logs" {
			v.PluginId = "nfs"
		}
		if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: v, RegisteredAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	claim := &pb.Claim{Id: "c1", VolumeId: "db-1", Operator: true, NodeId: n.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
	if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: claim}); err != nil {
		t.Fatal(err)
	}
	ids := func(vs []*pb.VolumeView) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.GetVolume().GetId())
		}
		return out
	}
	for _, tc := range []struct {
		req  *pb.VolumeListRequest
		want []string
		next string
	}{
		{&pb.VolumeListRequest{}, []string{"db-0", "db-1", "db-2", "logs"}, ""},
		{&pb.VolumeListRequest{PluginId: "nfs"}, []string{"logs"}, ""},
		{&pb.VolumeListRequest{NodeId: n.GetId()}, []string{"db-1"}, ""},
		{&pb.VolumeListRequest{NodeId: "elsewhere"}, nil, ""},
		{&pb.VolumeListRequest{Prefix: "db-", Query: &pb.QueryOptions{PerPage: 2}}, []string{"db-0", "db-1"}, "db-2"},
		{&pb.VolumeListRequest{Prefix: "db-", Query: &pb.QueryOptions{PerPage: 2, NextToken: "db-2"}}, []string{"db-2"}, ""},
		{&pb.VolumeListRequest{PluginId: "hp", Query: &pb.QueryOptions{PerPage: 3}}, []string{"db-0", "db-1", "db-2"}, ""},
	} {
		resp, err := vols.List(ctx10s(t), tc.req)
		if err != nil {
			t.Fatalf("List(%v): %v", tc.req, err)
		}
		if got := ids(resp.GetVolumes()); !slices.Equal(got, tc.want) || resp.GetMeta().GetNextToken() != tc.next {
			t.Errorf("List(%v) = %v next %q, want %v next %q", tc.req, got, resp.GetMeta().GetNextToken(), tc.want, tc.next)
		}
	}

	get, err := vols.Get(ctx10s(t), &pb.VolumeGetRequest{VolumeId: "db-1"})
	if err != nil {
		t.Fatal(err)
	}
	view := get.GetVolume()
	if len(view.GetClaims()) != 1 || view.GetClaims()[0].GetId() != "c1" || view.GetClaims()[0].GetState() != pb.ClaimState_CLAIM_STATE_RESERVED ||
		len(view.GetAttachments()) != 1 || view.GetAttachments()[0].GetNodeId() != n.GetId() ||
		view.GetAttachments()[0].GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING {
		t.Fatalf("db-1 = %v: want the reserved claim and its attaching attachment (the plugin requires controller publish)", view)
	}

	// A blocking list on the node wakes when the claim changes.
	at := get.GetMeta().GetIndex()
	type result struct {
		resp *pb.VolumeListResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := vols.List(ctx10s(t), &pb.VolumeListRequest{NodeId: n.GetId(), Query: &pb.QueryOptions{MinIndex: at, MaxWaitMs: 10_000}})
		done <- result{resp, err}
	}()
	if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.resp.GetMeta().GetIndex() <= at || len(r.resp.GetVolumes()) != 1 ||
			r.resp.GetVolumes()[0].GetClaims()[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			t.Fatalf("blocking list after the release: %v, %v (blocked at %d)", r.resp, r.err, at)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking list did not wake on the claim's release")
	}
}
