package server

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// schedVolumeCluster is one server with two work nodes running a healthy node
// instance of the "hostpath" plugin (no controller), and a registered
// volume "vol1" of mode.
func schedVolumeCluster(t *testing.T, mode pb.VolumeAccessMode) (*testCluster, *Server) {
	t.Helper()
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) { c.NumSchedulers = 4; c.noControllerCalls = true })
	s := tc.servers[0]
	csi := pb.NewCSIPluginsClient(tc.conn(s))
	for _, name := range []string{"n1", "n2"} {
		n := workNode(name)
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
		updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
			Nodes: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true, Provider: "hostpath.csi.berth.dev"}},
		})
	}
	vol := &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "hostpath", ExternalId: "ext-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: mode, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: vol, RegisteredAt: 1}); err != nil {
		t.Fatalf("registering vol1: %v", err)
	}
	if v, _ := s.State().VolumeByID(nil, "vol1"); !v.GetSchedulable() {
		t.Fatalf("vol1 = %v, want schedulable (its plugin has healthy node instances)", v)
	}
	return tc, s
}

// volumeJob is serviceJob claiming vol1 as "data".
func volumeJob(id string, count int32) *pb.Job {
	j := serviceJob(id, count)
	j.Groups[0].Volumes = map[string]*pb.VolumeRequest{"data": {Name: "data", Type: "csi", Source: "vol1"}}
	return j
}

// blockedOn waits for the job's blocked evaluation planned from a snapshot
// at or after since, whose failure names reason, and returns it.
func blockedOn(t *testing.T, s *Server, job string, since uint64, reason string) *pb.Evaluation {
	t.Helper()
	var found *pb.Evaluation
	testutil.WaitFor(t, 15*time.Second, func() error {
		evs, err := s.State().EvalsByJob(nil, job)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED || e.GetSnapshotIndex() < since || e.GetSnapshotIndex() == 0 {
				continue
			}
			// The blocked eval carries no metric itself: its creator (or,
			// re-blocked, itself) does.
			for _, m := range []*pb.Evaluation{e, evalByID(s, e.GetPreviousEval())} {
				for r := range m.GetFailedTgAllocs()["g"].GetConstraintFiltered() {
					if strings.Contains(r, reason) {
						found = e
						return nil
					}
				}
			}
		}
		return fmt.Errorf("job %s has no blocked eval since index %d naming %q", job, since, reason)
	})
	return found
}

func evalByID(s *Server, id string) *pb.Evaluation {
	e, _ := s.State().EvalByID(nil, id)
	return e
}

func TestVolumeJobIsPlacedWithItsClaimInTheSameApply(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	jobs := pb.NewJobsClient(tc.conn(s))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("db", 1)}); err != nil {
		t.Fatal(err)
	}
	a := waitAllocs(t, tc, s, "db", 1, nil)[0]
	claims, err := s.State().ClaimsByAlloc(nil, a.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 {
		t.Fatalf("alloc %s holds claims %v, want one on vol1", a.GetId(), claims)
	}
	c := claims[0]
	switch {
	case c.GetVolumeId() != "vol1" || c.GetNodeId() != a.GetNodeId() || c.GetMode() != pb.ClaimMode_CLAIM_MODE_WRITE:
		t.Errorf("claim %v, want a write claim on vol1 on the alloc's node %s", c, a.GetNodeId())
	case c.GetState() != pb.ClaimState_CLAIM_STATE_READY:
		t.Errorf("claim state %s, want ready (hostpath needs no controller publish)", c.GetState())
	case c.GetCreateIndex() != a.GetCreateIndex():
		t.Errorf("claim reserved at index %d, alloc placed at %d: not one apply", c.GetCreateIndex(), a.GetCreateIndex())
	}
}

// TestTwoJobsRacingForOneSingleWriterVolumeNeverBothGetIt: jobs registered
// at once, planned by concurrent workers from snapshots that each show the
// volume free: one gets it, every other is blocked with a reason naming
// the volume, and no alloc of theirs was ever placed.
func TestTwoJobsRacingForOneSingleWriterVolumeNeverBothGetIt(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER)
	jobs := pb.NewJobsClient(tc.conn(s))
	names := []string{"a", "b", "c", "d"}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		wg.Go(func() {
			if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob(name, 1)}); err != nil {
				errs <- fmt.Errorf("register %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var winner string
	testutil.WaitFor(t, 15*time.Second, func() error {
		winner = ""
		for _, name := range names {
			live := liveAllocs(t, tc, s, name)
			switch {
			case len(live) > 1 || (len(live) == 1 && winner != ""):
				t.Fatalf("two allocs hold single-node-single-writer vol1: job %s has %d, winner so far %q", name, len(live), winner)
			case len(live) == 1:
				winner = name
			}
		}
		if winner == "" {
			return errors.New("no job placed yet")
		}
		return nil
	})
	onlyWinnerHoldsVol1(t, s, names, winner)
}

// onlyWinnerHoldsVol1 checks that every job but winner is blocked on
// single-writer vol1, and never two: every alloc ever placed for names,
// and every claim of vol1, is one.
func onlyWinnerHoldsVol1(t *testing.T, s *Server, names []string, winner string) {
	t.Helper()
	for _, name := range names {
		if name == winner {
			continue
		}
		blockedOn(t, s, name, 0, `volume "vol1" (group volume "data"): no free claim (single-node-single-writer`)
	}
	// Never two: every alloc ever placed for these jobs, and every claim.
	var all int
	for _, name := range names {
		as, err := s.State().AllocsByJob(nil, name)
		if err != nil {
			t.Fatal(err)
		}
		all += len(as)
	}
	claims, err := s.State().ClaimsByVolume(nil, "vol1")
	if err != nil {
		t.Fatal(err)
	}
	if all != 1 || len(claims) != 1 {
		t.Fatalf("%d allocs were placed and vol1 holds %d claims, want 1 and 1", all, len(claims))
	}
}

// TestBlockedVolumeJobIsPlacedOnceTheClaimIsFreed: b waits for a's
// single-writer claim; stopping a moves the claim to releasing (b stays
// blocked: a releasing claim still holds the volume); when the client's
// node-detached report frees it, b is placed, with nothing else changing.
func TestBlockedVolumeJobIsPlacedOnceTheClaimIsFreed(t *testing.T) {
	tc, s := schedVolumeCluster(t, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	jobs := pb.NewJobsClient(tc.conn(s))
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("a", 1)}); err != nil {
		t.Fatal(err)
	}
	holder := waitAllocs(t, tc, s, "a", 1, nil)[0]
	if _, err := jobs.Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("b", 1)}); err != nil {
		t.Fatal(err)
	}
	blockedOn(t, s, "b", 0, fmt.Sprintf("claimed by alloc %q", holder.GetId()))

	if _, err := jobs.Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: "a"}); err != nil {
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
	// b was woken by the stop and blocked again from a snapshot that shows
	// the claim releasing; from here only the claim changes.
	released := claim.GetModifyIndex()
	blockedOn(t, s, "b", released, "releasing)")
	if got := liveAllocs(t, tc, s, "b"); len(got) != 0 {
		t.Fatalf("b placed %v while a's claim is releasing", got)
	}

	if _, err := s.raftApply(ctx10s(t), fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{
		ClaimId: claim.GetId(), State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: claim.GetNodeId(),
	}}}); err != nil {
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
}
