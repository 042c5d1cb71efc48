package volumeloops

import (
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/rpc/pb"
)

// attachedAndReleasing starts e's loops with fake, waits for v1/n2 to be
// attached, then marks n2 down and releases c1 (its claimant stopped; the
// down node's client will never report the unpublish).
func attachedAndReleasing(t *testing.T, e *volEnv, fake *volumetest.Controller) (stop func()) {
	t.Helper()
	stop = start(e.loops(fake))
	synctest.Wait()
	wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	e.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n2", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: time.Now().UnixNano()})
	e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
	synctest.Wait()
	return stop
}

func TestReaperForcesDetachOfADownNodeAfterForceDetachAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := attachedAndReleasing(t, e, fake)
		defer stop()

		time.Sleep(DefaultForceDetachAfter - time.Millisecond)
		synctest.Wait()
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			t.Fatalf("claim just before force_detach_after: %s, want releasing", pb.EnumWord(c.GetState()))
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes before force_detach_after, want 0", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		// Forced to node-detached; the attachment went detaching in that
		// apply, the controller unpublished, the claim is freed.
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim after force_detach_after: %v, want freed", c)
		}
		if a := e.attachment("v1", "n2"); a != nil {
			t.Fatalf("attachment after force_detach_after: %v, want removed", a)
		}
		if calls := fake.CallsOf(volumetest.UnpublishMethod); len(calls) != 1 || calls[0].Node != "n1" {
			t.Fatalf("unpublishes = %s, want one through n1", volumetest.DescribeCalls(calls))
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes an hour later, want 1", n)
		}
	})
}

func TestReaperHonoursTheConfiguredForceDetachAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		v := e.loops(fake)
		v.cfg.forceDetachAfter = time.Minute
		stop := start(v)
		defer stop()
		synctest.Wait()
		e.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n2", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: time.Now().UnixNano()})
		e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
		time.Sleep(time.Minute)
		synctest.Wait()
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim a minute after its node went down, force_detach_after 1m: %v, want freed", c)
		}
	})
}

func TestReaperLeavesANodeThatCameBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := attachedAndReleasing(t, e, fake)
		defer stop()
		time.Sleep(time.Minute)
		e.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n2", Status: pb.NodeStatus_NODE_STATUS_READY, UpdatedAt: time.Now().UnixNano()})
		time.Sleep(time.Hour)
		synctest.Wait()
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			t.Fatalf("claim of a node that came back: %v, want releasing (its client detaches it)", c)
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes for a node that came back, want 0", n)
		}
		// Its client reports the unpublish: the detach runs as usual.
		e.apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: "n2"}}})
		synctest.Wait()
		if e.claim("c1") != nil || len(fake.CallsOf(volumetest.UnpublishMethod)) != 1 {
			t.Fatalf("after the client's report: claim %v, %d unpublishes; want freed, 1", e.claim("c1"), len(fake.CallsOf(volumetest.UnpublishMethod)))
		}
	})
}

// A claim released after its node was fenced is forced at once: the
// fence's own apply moved only the claims releasing then.
func TestReaperForcesAtOnceOnAFencedNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		e.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n2", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: time.Now().UnixNano()})
		e.apply(fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "n2", Fenced: true, UpdatedAt: time.Now().UnixNano()})
		synctest.Wait()
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c1 after the fence: %v, want still ready (its claimant runs)", c)
		}
		e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
		synctest.Wait()
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim released on a fenced node: %v, want freed at once", c)
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes, want 1 (the controller unpublish still runs)", n)
		}
	})
}

// TestReaperNeverDoublesAnUnpublish: the reaper forces the claim, the
// node's client reports the same detach late, the first unpublish fails
// uncertain and the leader changes while the retry is due: every path
// that could unpublish again finds the detach done or in hand, and the
// plugin sees one unpublish per try (two: the failed one, the retry).
func TestReaperNeverDoublesAnUnpublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.UnpublishMethod, codes.Unavailable)
		stop1 := attachedAndReleasing(t, e, fake)
		time.Sleep(DefaultForceDetachAfter)
		synctest.Wait()
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_DETACHING)
		if a.GetAttempts() != 1 || len(fake.CallsOf(volumetest.UnpublishMethod)) != 1 {
			t.Fatalf("after the first unpublish failed: %v, %d calls; want attempt 1 recorded, 1 call", a, len(fake.CallsOf(volumetest.UnpublishMethod)))
		}
		// The down node's client reports the detach late: refused or a
		// no-op, never a second detach.
		_, _ = e.propose(t.Context(), fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
			{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: "n2"}}})
		stop1()

		stop2 := start(e.loops(fake))
		defer stop2()
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes once the new leader started, want 1: the retry is not due yet", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if e.attachment("v1", "n2") != nil || e.claim("c1") != nil {
			t.Fatalf("after the retry: attachment %v, claim %v; want both gone", e.attachment("v1", "n2"), e.claim("c1"))
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes in all, want 2 (the failed try and its one retry)", n)
		}
	})
}
