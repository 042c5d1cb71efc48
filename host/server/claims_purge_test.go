package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"berth.dev/berth/internal/rules"

	"berth.dev/berth/fsm"
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

// placeOldClaim places an alloc of job on n1 with a claim of volume as a
// server from before claims carried their request placed it (no
// request): the client's answers fall back on the alloc's job version.
func placeOldClaim(t *testing.T, cc *claimCluster, job, volume string, vols map[string]*pb.VolumeRequest) string {
	t.Helper()
	j := serviceJob(job, 1)
	j.Groups[0].Volumes = vols
	if _, err := cc.s.raftApply(ctx10s(t), fsm.JobRegister, &pb.JobRegisterCommand{Job: j}); err != nil {
		t.Fatal(err)
	}
	stored, _ := cc.s.fsm.State().JobByID(nil, job)
	alloc := "a-" + job
	c := &pb.Claim{Id: "claim-" + alloc, VolumeId: volume, AllocId: alloc, NodeId: cc.n1.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: snw, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}
	if _, err := cc.s.raftApplyResult(ctx10s(t), fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e-" + job, JobId: job,
		JobVersion: stored.GetVersion(),
		Allocs: []*pb.Allocation{{Id: alloc, Name: job + ".g[0]", NodeId: cc.n1.GetId(), JobId: job, JobVersion: stored.GetVersion(), TaskGroup: "g",
			DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
			Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
		Claims: []*pb.Claim{c}}}); err != nil {
		t.Fatal(err)
	}
	if cs, _ := cc.s.fsm.State().ClaimsByAlloc(nil, alloc); len(cs) != 1 || cs[0].GetRequest() != nil {
		t.Fatalf("alloc %s's claims %v, want one without a request", alloc, cs)
	}
	return alloc
}

// A claim placed without its request (an older server) is answered the
// request of the alloc's group in the job version it runs, merged as the
// scheduler merges it: a group naming the volume twice, once read-only,
// writes (read_only false). And only that job's version: after a purge
// and a registration of another job under the same ID (its versions start
// at 0 again), its version 0 is not the alloc's, and no request is
// answered rather than the other job's.
func TestOldClaimFallbackReadsTheAllocsOwnJobVersionMerged(t *testing.T) {
	cc := newClaimCluster(t, 1, false)
	cc.volume(t, "data", snw)
	n1 := cc.n1.GetId()

	twice := placeOldClaim(t, cc, "twice", "data", map[string]*pb.VolumeRequest{
		"a": {Name: "a", Type: "csi", Source: "data", ReadOnly: true},
		"b": {Name: "b", Type: "csi", Source: "data"},
	})
	resp, err := cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: twice, VolumeId: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetRequest(); r == nil || r.GetReadOnly() {
		t.Fatalf("request of a group naming data read-only and writable: %v; want writable", r)
	}

	cc.volume(t, "logs", snw)
	alloc := placeOldClaim(t, cc, "web", "logs", map[string]*pb.VolumeRequest{
		"logs": {Name: "logs", Type: "csi", Source: "logs", MountOptions: &pb.MountOptions{FsType: "ext4"}}})
	if _, err := cc.s.raftApply(ctx10s(t), fsm.JobDeregister, &pb.JobDeregisterCommand{JobId: "web", Purge: true}); err != nil {
		t.Fatal(err)
	}
	other := serviceJob("web", 1)
	other.Groups[0].Volumes = map[string]*pb.VolumeRequest{"logs": {Name: "logs", Type: "csi", Source: "logs",
		MountOptions: &pb.MountOptions{FsType: "xfs"}}}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.JobRegister, &pb.JobRegisterCommand{Job: other}); err != nil {
		t.Fatal(err)
	}
	if j, _ := cc.s.fsm.State().JobByID(nil, "web"); j.GetVersion() != 0 {
		t.Fatalf("the new job web is at version %d, want 0 (the alloc's version number)", j.GetVersion())
	}
	resp, err = cc.claims.ClientClaim(ctx10s(t), &pb.ClientClaimRequest{NodeId: n1, AllocId: alloc, VolumeId: "logs"})
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.GetRequest(); r != nil {
		t.Fatalf("request answered from another job's version 0: %v; want none", r)
	}
}

// An alloc the client does not hold and that ended (here reported failed;
// in the field lost while its node was away, the node back before
// force_detach_after) is sent to its node in full while a claim of it is
// still releasing there: only that client takes the claim off the node.
// Sent as a stub, as every ended alloc the client does not hold is, the
// claim stayed releasing for good.
func TestClientWatchSendsAnEndedAllocWhileItsClaimIsReleasing(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	jobs, claims := pb.NewJobsClient(tc.conn(s)), pb.NewClaimsClient(tc.conn(s))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("a", 1)}); err != nil {
		t.Fatal(err)
	}
	holder := waitAllocs(t, tc, s, "a", 1, nil)[0]
	node := holder.GetNodeId()
	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewClientAllocsClient(tc.conn(s)).Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: node, Updates: []*pb.AllocClientUpdate{{
		AllocId: holder.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		a, err := s.State().AllocByID(nil, holder.GetId())
		if err != nil || !rules.AllocClientTerminal(a) || !rules.AllocServerTerminal(a) {
			return fmt.Errorf("alloc %v (%v), want stopped and failed", a, err)
		}
		cs, err := s.State().ClaimsByAlloc(nil, holder.GetId())
		if err != nil || len(cs) != 1 || cs[0].GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			return fmt.Errorf("claims %v (%v), want one releasing", cs, err)
		}
		return nil
	})
	sent := func() *pb.Allocation {
		t.Helper()
		resp, err := pb.NewClientAllocsClient(tc.conn(s)).Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: node, Paged: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.GetAllocs() {
			if a.GetId() == holder.GetId() {
				return a
			}
		}
		return nil
	}
	if a := sent(); a.GetJobId() == "" {
		t.Fatalf("ended alloc %s with a releasing claim sent as %v; want it in full", holder.GetId(), a)
	}
	if _, err := claims.ClientClaimUpdate(ctx10s(t), &pb.ClientClaimUpdateRequest{NodeId: node, AllocId: holder.GetId(), VolumeId: "vol1",
		State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if a := sent(); a != nil && a.GetJobId() != "" {
			return fmt.Errorf("alloc %s sent in full after its claim was freed", holder.GetId())
		}
		return nil
	})
}
