package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// TestFreedClaimIsReservedByTheNextPlan: a job blocked on a single-writer
// claim gets it in the plan the leader proposes once the apply that frees
// the claim is read, with no raft write between to make its blocked
// evaluation pending (the feed hands it to the broker in memory): between
// the apply that frees the claim and the plan that reserves it for the
// next alloc, the log holds no EvalUpsert. Never two: the plan that
// reserves it comes after the one that freed it, and the volume holds one
// claim.
func TestFreedClaimIsReservedByTheNextPlan(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	jobs := pb.NewJobsClient(tc.conn(s))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("a", 1)}); err != nil {
		t.Fatal(err)
	}
	holder := waitAllocs(t, tc, s, "a", 1, nil)[0]
	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("b", 1)}); err != nil {
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
	blockedOn(t, s, "b", claim.GetModifyIndex(), "releasing)")

	freedAt, err := s.raftApply(ctx10s(t), fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{
		ClaimId: claim.GetId(), State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: claim.GetNodeId(),
	}}})
	if err != nil {
		t.Fatalf("reporting the claim node-detached: %v", err)
	}
	if c, _ := s.State().ClaimByID(nil, claim.GetId()); c != nil {
		t.Fatalf("claim %v not freed by node-detached (no attachment to wait for)", c)
	}
	b := waitAllocs(t, tc, s, "b", 1, nil)[0]
	cs, err := s.State().ClaimsByAlloc(nil, b.GetId())
	if err != nil || len(cs) != 1 || cs[0].GetVolumeId() != "vol1" {
		t.Fatalf("b's alloc holds claims %v (%v), want one on vol1", cs, err)
	}
	reservedAt := cs[0].GetCreateIndex()
	if reservedAt <= freedAt || b.GetCreateIndex() != reservedAt {
		t.Fatalf("b's alloc placed at %d with its claim reserved at %d; the old claim was freed at %d", b.GetCreateIndex(), reservedAt, freedAt)
	}
	if all, _ := s.State().ClaimsByVolume(nil, "vol1"); len(all) != 1 {
		t.Fatalf("vol1 holds %d claims, want 1: %v", len(all), all)
	}
	for i := freedAt + 1; i < reservedAt; i++ {
		var l raft.Log
		if err := s.logs.GetLog(i, &l); err != nil {
			t.Fatalf("raft log entry %d: %v", i, err)
		}
		if l.Type != raft.LogCommand || len(l.Data) == 0 {
			continue
		}
		if mt := fsm.MessageType(l.Data[0]) &^ fsm.IgnoreUnknownFlag; mt == fsm.EvalUpsert {
			t.Fatalf("entry %d, between the claim freed (%d) and reserved again (%d), is an EvalUpsert: "+
				"a raft round to unblock the evaluation", i, freedAt, reservedAt)
		}
	}
	t.Logf("claim freed at index %d, reserved for b at %d", freedAt, reservedAt)
}
