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
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// A publish that failed for want of a usable controller
// because the controller's node was fenced is recorded final and waits for
// a change of the volume, the plugin's row or the attachment's node. An
// unfence changes only the controller's node row (the plugin row does not
// carry the fence), so nothing wakes the attach reconciler: the claim
// stays reserved until something unrelated changes.
func TestAttachResumesWhenTheControllersNodeIsUnfenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.apply(fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "n1", Fenced: true, UpdatedAt: 1})
		fake := volumetest.NewController()
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
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 1 {
			t.Errorf("%d publishes an hour after the controller's node was unfenced, want 1", n)
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

// A publish the controller refuses with FailedPrecondition
// because the volume is still published to another node (CSI's answer
// for a single-node volume published elsewhere) is final and waits for a
// change of the volume, its plugin's row or the node. The reconcile pass
// that unpublishes that leftover (an orphan: no attachment holds it, e.g.
// a detach whose node was gone, or a deregister -force) writes no row, so
// the refused attachment is never tried again and its claim stays
// reserved for good, though nothing stands in its way any more.
func TestAttachRetriesAfterTheReconcilePassUnpublishesTheOrphanInItsWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.Published["ext-v1"] = map[string]bool{"csi-n1": true} // left over: no attachment v1/n1
		fake.FailNext(volumetest.PublishMethod, codes.FailedPrecondition)
		v := e.loops(fake)
		v.cfg.reconcileInterval = 5 * time.Minute
		stop := start(v)
		defer stop()
		synctest.Wait()
		a := e.attachment("v1", "n2")
		if a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
			t.Fatalf("after the refused publish: %v, want a final error", a)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes after the reconcile pass, want 1 (the orphan on csi-n1)", n)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c1 is %s an hour after the orphan was unpublished, want ready", pb.EnumWord(c.GetState()))
		}
	})
}

// deregister -force accepted a volume whose claims are
// node-detached while their attachment is still detaching (its controller
// unpublish not done yet: here the controller is unreachable for a
// while), and deleted the attachment with the volume. Nothing unpublished
// it then: the attach reconciler had no row left, and the reconcile pass
// leaves alone the volumes that are not berth's; the volume stayed
// published to n2 on the storage system. Force is now refused while an
// attachment is left (FailedPrecondition, naming its node and state), the
// leader's unpublish runs to its end, and the deregister goes through
// after it.
func TestForcedDeregisterOfADetachingVolumeStillUnpublishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		v := e.loops(fake)
		v.cfg.reconcileInterval = 5 * time.Minute
		stop := start(v)
		defer stop()
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

		fake.FailNext(volumetest.UnpublishMethod, codes.Unavailable, codes.Unavailable, codes.Unavailable)
		e.release("c1", "n2")
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_DETACHING)
		_, err := e.propose(context.Background(), fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "v1", Force: true})
		if errcode.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `node "n2" (attachment detaching)`) {
			t.Fatalf("deregister -force while v1/n2 is detaching: %v, want FailedPrecondition naming the attachment", err)
		}

		time.Sleep(time.Hour)
		synctest.Wait()
		fake.Mu.Lock()
		left := fake.Published["ext-v1"]["csi-n2"]
		fake.Mu.Unlock()
		if left {
			t.Fatalf("an hour after the forced deregister, ext-v1 is still published to csi-n2 (unpublish calls: %d, all failed)",
				len(fake.CallsOf(volumetest.UnpublishMethod)))
		}
		if a := e.attachment("v1", "n2"); a != nil {
			t.Fatalf("attachment v1/n2 is left after its unpublish: %v", a)
		}
		e.apply(fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "v1", Force: true})
		if vol, err := e.snap().VolumeByID(nil, "v1"); err != nil || vol != nil {
			t.Fatalf("v1 after its attachment was unpublished and it was deregistered: %v, %v", vol, err)
		}
	})
}
