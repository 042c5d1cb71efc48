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

// An uncertain failure waits its backoff only while nothing it depends on
// changes: a controller that turns up (or moves) meanwhile gets the call at
// once. The chaos suite's seed 5024 had an unpublish refused Unavailable by
// a controller instance still registering, after six refusals for want of
// any healthy controller; the backoff had grown to 76 s, and the claim
// waited it out although a second controller was healthy a second later.
func TestUncertainFailureIsRetriedAtOnceWhenAControllerAppears(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detach bool
	}{
		{"publish", false},
		{"unpublish", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEBSEnv(t)
				fake := volumetest.NewController()
				method := volumetest.PublishMethod
				if tc.detach {
					method = volumetest.UnpublishMethod
				}
				fake.FailNext(method, codes.Unavailable)
				stop := start(e.loops(fake))
				defer stop()
				synctest.Wait()
				if tc.detach {
					wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
					e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
					e.apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: "n2"}}})
					synctest.Wait()
				}
				a := e.attachment("v1", "n2")
				if a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN || a.GetNextRetryAt() == 0 {
					t.Fatalf("after the failed %s: %v, want an uncertain error with a retry time", tc.name, a)
				}
				failed := time.Now()

				// A second controller becomes healthy; no time passes.
				e.registerNode("n3")
				e.reportPlugins("n3", volumetest.EBSController(true), nil)
				synctest.Wait()
				if waited := time.Since(failed); waited != 0 {
					t.Fatalf("the test's clock moved %s", waited)
				}
				calls := fake.CallsOf(method)
				if len(calls) != 2 {
					t.Fatalf("%s calls = %s, want the retry at once, when the controller appeared", tc.name, volumetest.DescribeCalls(calls))
				}
				if tc.detach {
					if a := e.attachment("v1", "n2"); a != nil {
						t.Fatalf("attachment after the retried unpublish: %v, want removed", a)
					}
					if c := e.claim("c1"); c != nil {
						t.Fatalf("claim after the retried unpublish: %v, want freed", c)
					}
					return
				}
				wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
			})
		})
	}
}
