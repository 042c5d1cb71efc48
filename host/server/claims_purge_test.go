package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// TestPurgedJobsClaimIsFreed: `job stop -purge` removes the job and every
// version of it while its alloc still holds its claim. The claim's release
// reads nothing of the job: the client's node-detached report is taken
// and frees the claim, and the next job is placed on the volume. Before,
// the report was refused PermissionDenied ("asks for no volume"): the
// server looked the volume request up in the purged job version, and the
// claim stayed releasing until the alloc was collected.
func TestPurgedJobsClaimIsFreed(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	jobs, claims := pb.NewJobsClient(tc.conn(s)), pb.NewClaimsClient(tc.conn(s))
	j := volumeJob("a", 1)
	j.Groups[0].Volumes["data"].MountOptions = &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}}
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: j}); err != nil {
		t.Fatal(err)
	}
	holder := waitAllocs(t, tc, s, "a", 1, nil)[0]
	node := holder.GetNodeId()
	ask := &pb.ClientClaimRequest{NodeId: node, AllocId: holder.GetId(), VolumeId: "vol1"}
	before, err := claims.ClientClaim(ctx10s(t), ask)
	if err != nil {
		t.Fatal(err)
	}
	// The request the client publishes with is the claim's own, taken at
	// placement.
	if got := before.GetRequest().GetMountOptions(); got.GetFsType() != "ext4" || !slices.Equal(got.GetMountFlags(), []string{"noatime"}) {
		t.Fatalf("client claim's request %v, want the group's mount options", before.GetRequest())
	}

	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "a", Purge: true}); err != nil {
		t.Fatal(err)
	}
	var claim *pb.Claim
	testutil.WaitFor(t, 10*time.Second, func() error {
		cs, err := s.State().ClaimsByAlloc(nil, holder.GetId())
		if err != nil || len(cs) != 1 || cs[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			return fmt.Errorf("holder's claims %v (%v), want one releasing", cs, err)
		}
		claim = cs[0]
		return nil
	})
	if v, _ := s.State().JobVersions(nil, "a"); len(v) != 0 {
		t.Fatalf("job a still has versions %v after the purge", v)
	}
	// The client still reads its claim (a restarted client tearing down
	// asks), with the request it was placed with.
	after, err := claims.ClientClaim(ctx10s(t), ask)
	if err != nil {
		t.Fatalf("client claim of the purged job's alloc: %v", err)
	}
	if after.GetRequest().GetMountOptions().GetFsType() != "ext4" || after.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("client claim after the purge: %v", after)
	}

	if _, err := claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: node, AllocId: holder.GetId(), VolumeId: "vol1",
		State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED}); err != nil {
		t.Fatalf("the client's detach report of the purged job's claim: %v", err)
	}
	if c, _ := s.State().ClaimByID(nil, claim.GetId()); c != nil {
		t.Fatalf("claim %v not freed by the node-detached report", c)
	}
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("b", 1)}); err != nil {
		t.Fatal(err)
	}
	b := waitAllocs(t, tc, s, "b", 1, nil)[0]
	if cs, _ := s.State().ClaimsByAlloc(nil, b.GetId()); len(cs) != 1 || cs[0].GetVolumeId() != "vol1" {
		t.Fatalf("b's alloc holds claims %v, want one on vol1", cs)
	}
}
