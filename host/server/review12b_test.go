package server

import (
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// Review 12b: a publish that failed for want of a usable controller
// because the controller's node was fenced is recorded final and waits for
// a change of the volume, the plugin's row or the attachment's node. An
// unfence changes only the controller's node row (the plugin row does not
// carry the fence), so nothing wakes the attach reconciler: the claim
// stays reserved until something unrelated changes.
func TestReview12bAttachResumesWhenTheControllersNodeIsUnfenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.apply(fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "n1", Fenced: true, UpdatedAt: 1})
		fake := newFakeController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		a := e.attachment("v1", "n2")
		if a.GetLastError().GetCode() != pb.GrpcCode(codes.FailedPrecondition) || a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
			t.Fatalf("with the controller's node fenced: %v, want a final FailedPrecondition", a)
		}
		e.apply(fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "n1", Fenced: false, UpdatedAt: 2})
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(fake.callsOf(publishMethod)); n != 1 {
			t.Errorf("%d publishes an hour after the controller's node was unfenced, want 1", n)
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}
