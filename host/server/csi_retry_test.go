package server

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
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
		fake := newFakeController()
		fake.published["ext-v1"] = map[string]bool{"csi-n1": true} // no attachment v1/n1 holds it
		fake.failNext(publishMethod, codes.FailedPrecondition)
		first := e.loops(fake)
		first.cfg.reconcileInterval = 5 * time.Minute
		ctx, lose := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); first.run(ctx) }()
		synctest.Wait()
		if a := e.attachment("v1", "n2"); a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
			t.Fatalf("after the refused publish: %v, want a final error", a)
		}

		// The first leader's retried publish ends with its leadership.
		fake.mu.Lock()
		fake.onCall = func(ctx context.Context, c fakeCall) error {
			if c.method != publishMethod {
				return nil
			}
			lose()
			<-ctx.Done()
			return ctx.Err()
		}
		fake.mu.Unlock()
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		lose() // already lost when the retried publish came
		<-done
		if n := len(fake.callsOf(unpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes by the first leader, want 1 (the orphan on csi-n1)", n)
		}
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
		if a.GetLastError().GetClass() == pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL || !strings.Contains(a.GetLastError().GetMessage(), "csi-n1") {
			t.Fatalf("the attachment after the orphan was unpublished: %v, want the repair recorded (naming csi-n1), not the final error", a)
		}

		fake.mu.Lock()
		fake.onCall = nil
		fake.mu.Unlock()
		stop := start(e.loops(fake)) // the next leader, reconcile pass off
		defer stop()
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c1 is %s after the next leader's publish, want ready", fsm.ClaimStateWord(c.GetState()))
		}
	})
}

// A detaching attachment whose unpublish failed final waits for a change
// of its volume, plugin or node; once its node is collected nothing of
// the node can change, and a plugin row that no longer lists the node does
// not change either. It is retried on the backoff then (its unpublish
// names the CSI node ID its publish recorded), first from its failure
// time (recorded while the node was there), then at the next_retry_at
// recorded with a failure of the gone node, until the unpublish succeeds.
func TestDetachOfAGoneNodeRetriesAFinalUnpublishOnTheBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := newFakeController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

		fake.failNext(unpublishMethod, codes.FailedPrecondition, codes.FailedPrecondition, codes.FailedPrecondition)
		e.release("c1", "n2")
		synctest.Wait()
		// n2's node plugin leaves: the plugin row and n2's row change, so
		// the final failure is tried again at once, and fails again.
		e.reportPlugins("n2", nil, nil)
		synctest.Wait()
		if n := len(fake.callsOf(unpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes, want 2 (the first, and the retry on n2's change)", n)
		}
		a := e.attachment("v1", "n2")
		if a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL || a.GetNextRetryAt() != 0 {
			t.Fatalf("after the second unpublish: %v, want a final error without a retry time (n2 is still known)", a)
		}
		failedAt := time.Unix(0, a.GetLastError().GetFailedAt())

		// n2 is collected: no row of it is left, and the plugin row does
		// not list it any more. Retried at the failure plus the nominal
		// backoff after 2 attempts (2 s), not before.
		e.apply(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n2"})
		synctest.Wait()
		if n := len(fake.callsOf(unpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes right after n2 was collected, want 2 (its retry comes on the backoff)", n)
		}
		time.Sleep(time.Until(failedAt.Add(2*time.Second)) - time.Millisecond)
		synctest.Wait()
		if n := len(fake.callsOf(unpublishMethod)); n != 2 {
			t.Fatalf("%d unpublishes before the backoff ended, want 2", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		calls := fake.callsOf(unpublishMethod)
		if len(calls) != 3 {
			t.Fatalf("%d unpublishes once the backoff ended, want 3", len(calls))
		}
		if got := calls[2].req.(interface{ GetNodeId() string }).GetNodeId(); got != "csi-n2" {
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
		if n := len(fake.callsOf(unpublishMethod)); n != 4 {
			t.Fatalf("%d unpublishes, want 4", n)
		}
		if a := e.attachment("v1", "n2"); a != nil {
			t.Fatalf("attachment v1/n2 after its unpublish succeeded: %v, want it removed", a)
		}
		fake.mu.Lock()
		left := fake.published["ext-v1"]["csi-n2"]
		fake.mu.Unlock()
		if left {
			t.Fatal("ext-v1 is still published to csi-n2")
		}
	})
}
