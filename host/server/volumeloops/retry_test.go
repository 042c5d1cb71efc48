package volumeloops

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/rpc/pb"
)

// The mark the reconcile pass leaves on a publish refused because of an
// orphan (review 12b) is a raft write: a leader that loses its leadership
// after unpublishing the orphan, during the publish it retries, leaves the
// retry to the next leader, which finds neither the orphan (gone) nor a
// changed volume, plugin or node to wake a final error.
func TestAttachRetryAfterTheOrphanIsUnpublishedSurvivesALeaderChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.Published["ext-v1"] = map[string]bool{"csi-n1": true} // no attachment v1/n1 holds it
		fake.FailNext(volumetest.PublishMethod, codes.FailedPrecondition)
		first := e.loops(fake)
		first.cfg.reconcileInterval = 5 * time.Minute
		ctx, lose := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); first.Run(ctx) }()
		synctest.Wait()
		if a := e.attachment("v1", "n2"); a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
			t.Fatalf("after the refused publish: %v, want a final error", a)
		}

		// The first leader's retried publish ends with its leadership.
		fake.Mu.Lock()
		fake.OnCall = func(ctx context.Context, c volumetest.Call) error {
			if c.Method != volumetest.PublishMethod {
				return nil
			}
			lose()
			<-ctx.Done()
			return ctx.Err()
		}
		fake.Mu.Unlock()
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		lose() // already lost when the retried publish came
		<-done
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes by the first leader, want 1 (the orphan on csi-n1)", n)
		}
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
		if a.GetLastError().GetClass() == pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL || !strings.Contains(a.GetLastError().GetMessage(), "csi-n1") {
			t.Fatalf("the attachment after the orphan was unpublished: %v, want the repair recorded (naming csi-n1), not the final error", a)
		}

		fake.Mu.Lock()
		fake.OnCall = nil
		fake.Mu.Unlock()
		stop := start(e.loops(fake)) // the next leader, reconcile pass off
		defer stop()
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c1 is %s after the next leader's publish, want ready", pb.EnumWord(c.GetState()))
		}
	})
}

// A detaching attachment whose unpublish failed final is tried again at
// a change of its volume, plugin or node, and on the backoff; once its
// node is collected nothing of the node can change, and a plugin row that
// no longer lists the node does not change either: the backoff goes on
// (its unpublish names the CSI node ID its publish recorded) until the
// unpublish succeeds.
func TestDetachOfAGoneNodeRetriesAFinalUnpublishOnTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

		fake.FailNext(volumetest.UnpublishMethod, codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition)
		e.release("c1", "n2")
		synctest.Wait()
		// n2's node plugin leaves: the plugin row and n2's row change, so
		// the final failure is tried again at once, and fails again.
		e.reportPlugins("n2", nil, nil)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes, want 2 (the first, and the retry on n2's change)", n)
		}
		a := e.attachment("v1", "n2")
		failedAt := time.Unix(0, a.GetLastError().GetFailedAt())
		if a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL ||
			time.Unix(0, a.GetNextRetryAt()).Sub(failedAt) != 1600*time.Millisecond {
			t.Fatalf("after the second unpublish: %v, want a final error retried 1.6 s after it", a)
		}

		// n2 is collected: no row of it is left, and the plugin row does
		// not list it any more. Retried at the recorded next_retry_at, not
		// before.
		e.apply(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n2"})
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes right after n2 was collected, want 2 (its retry comes on the backoff)", n)
		}
		time.Sleep(time.Until(failedAt.Add(1600*time.Millisecond)) - time.Millisecond)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes before the backoff ended, want 2", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		calls := fake.CallsOf(volumetest.UnpublishMethod)
		if len(calls) != 3 {
			t.Fatalf("%d unpublishes once the backoff ended, want 3", len(calls))
		}
		if got := calls[2].Req.(interface{ GetNodeId() string }).GetNodeId(); got != "csi-n2" {
			t.Fatalf("the gone node's unpublish names CSI node %q, want csi-n2 (recorded at publish)", got)
		}
		// Failed final with n2 gone: the retry time is recorded (4 s of
		// backoff after 3 attempts, jitter 0: 0.8 of it).
		a = e.attachment("v1", "n2")
		if a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL ||
			time.Unix(0, a.GetNextRetryAt()).Sub(time.Unix(0, a.GetLastError().GetFailedAt())) != 3200*time.Millisecond {
			t.Fatalf("after the third unpublish: %v, want a final error retried 3.2 s after it", a)
		}
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 4 {
			t.Fatalf("%d unpublishes, want 4", n)
		}
		if a := e.attachment("v1", "n2"); a != nil {
			t.Fatalf("attachment v1/n2 after its unpublish succeeded: %v, want it removed", a)
		}
		fake.Mu.Lock()
		left := fake.Published["ext-v1"]["csi-n2"]
		fake.Mu.Unlock()
		if left {
			t.Fatal("ext-v1 is still published to csi-n2")
		}
	})
}

// ControllerUnpublishVolume answered Internal once (the
// plugin's disk was full) and nothing retried it, so the claim stayed
// node-detached and its attachment detaching for good, with the node, the
// volume and the plugin all there and unchanged. A detach is a teardown:
// its final failures are retried on the capped, jittered backoff, with the
// error, the attempts and the next try on the attachment, until the
// unpublish succeeds and the claim is freed.
func TestDetachRetriesAFinalUnpublishUntilItSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		v := e.loops(fake)
		v.cfg.retryMax = 4 * time.Second
		stop := start(v)
		defer stop()
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

		fails := []codes.Code{codes.Internal, codes.Internal, codes.Internal, codes.Internal, codes.Internal}
		fake.FailNext(volumetest.UnpublishMethod, fails...)
		e.release("c1", "n2")
		synctest.Wait()
		// Backoff with zero jitter (0.8 of it): 1 s, 2 s, 4 s, then capped
		// at retryMax (4 s: 3.2 s jittered).
		for i, want := range []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 3200 * time.Millisecond, 3200 * time.Millisecond} {
			a := e.attachment("v1", "n2")
			wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_DETACHING)
			le := a.GetLastError()
			failedAt := time.Unix(0, le.GetFailedAt())
			if le.GetCode() != pb.GrpcCode(codes.Internal) || le.GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL ||
				a.GetAttempts() != int32(i+1) || time.Unix(0, a.GetNextRetryAt()).Sub(failedAt) != want {
				t.Fatalf("after unpublish %d: %v, want a final Internal error, attempts %d, retried %s after it", i+1, a, i+1, want)
			}
			if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
				t.Fatalf("claim c1 while its detach fails: %v, want node-detached", c)
			}
			time.Sleep(time.Until(failedAt.Add(want)) - time.Millisecond)
			synctest.Wait()
			if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != i+1 {
				t.Fatalf("%d unpublishes before retry %d was due, want %d", n, i+1, i+1)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != i+2 {
				t.Fatalf("%d unpublishes once retry %d was due, want %d", n, i+1, i+2)
			}
		}
		if a := e.attachment("v1", "n2"); a != nil {
			t.Fatalf("attachment v1/n2 after its unpublish succeeded: %v, want it removed", a)
		}
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim c1 after the detach: %v, want freed", c)
		}
	})
}

// A final detach failure recorded without a retry time (by a server
// before detach failures were retried) is retried at its failure time plus
// the nominal backoff, the same on every leader.
func TestDetachFailureWithoutARetryTimeIsRetriedOnTheNominalBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.apply(fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n2", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED,
			ControllerNodeId: "n1", CsiNodeId: "csi-n2"})
		e.release("c1", "n2")
		failedAt := time.Now()
		e.apply(fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n2", State: pb.AttachmentState_ATTACHMENT_STATE_DETACHING,
			ControllerNodeId: "n1", CsiNodeId: "csi-n2", Attempts: 2, UpdatedAt: failedAt.UnixNano(),
			Error: &pb.VolumeError{Message: "volume v1: internal", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL,
				Code: pb.GrpcCode(codes.Internal), FailedAt: failedAt.UnixNano(), DecidedIndex: 1 << 40}})
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes before the nominal backoff (2 s after 2 attempts), want 0", n)
		}
		time.Sleep(2*time.Second - time.Millisecond)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes a millisecond before the nominal backoff ended, want 0", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 || e.attachment("v1", "n2") != nil {
			t.Fatalf("%d unpublishes, attachment %v once the nominal backoff ended; want 1 and the attachment removed", n, e.attachment("v1", "n2"))
		}
	})
}
