package volumeloops

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// reconcileEnv is newEBSEnv with v1 attached to n2 and the loops running
// with a reconcile pass every interval.
func reconcileEnv(t *testing.T, fake *volumetest.Controller, interval time.Duration) (*volEnv, func()) {
	t.Helper()
	e := newEBSEnv(t)
	v := e.loops(fake)
	v.cfg.reconcileInterval = interval
	stop := start(v)
	synctest.Wait()
	wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	return e, stop
}

func TestReconcileRepublishesWhatTheControllerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := volumetest.NewController()
		e, stop := reconcileEnv(t, fake, 5*time.Minute)
		defer stop()
		// The storage system forgets the publish (restored from backup, a
		// detach made behind berth's back).
		fake.Mu.Lock()
		delete(fake.Published, "ext-v1")
		fake.Mu.Unlock()

		time.Sleep(5*time.Minute - time.Millisecond)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.ListMethod)); n != 0 {
			t.Fatalf("%d ListVolumes before the first interval, want 0 (never on the fast path)", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.ListMethod)); n != 1 {
			t.Fatalf("%d ListVolumes after one interval, want 1", n)
		}
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 {
			t.Fatalf("%d publishes, want 2 (the first and the repair)", n)
		}
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		le := a.GetLastError()
		if a.GetAttempts() != 1 || le.GetCode() != pb.GrpcCode(codes.OK) || !strings.Contains(le.GetMessage(), "did not list volume v1 as published to node n2; published again") {
			t.Fatalf("attachment after the repair: %v, want the repair recorded (attempt 1, code OK, naming volume and node)", a)
		}
		// The next pass finds nothing to repair.
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if l, p := len(fake.CallsOf(volumetest.ListMethod)), len(fake.CallsOf(volumetest.PublishMethod)); l != 2 || p != 2 {
			t.Fatalf("second pass: %d lists, %d publishes; want 2 lists, no new publish", l, p)
		}
	})
}

func TestReconcileRecordsAFailedRepair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := volumetest.NewController()
		e, stop := reconcileEnv(t, fake, time.Minute)
		defer stop()
		fake.Mu.Lock()
		delete(fake.Published, "ext-v1")
		fake.Mu.Unlock()
		fake.FailNext(volumetest.PublishMethod, codes.PermissionDenied)
		time.Sleep(time.Minute)
		synctest.Wait()
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if le := a.GetLastError(); le.GetCode() != pb.GrpcCode(codes.PermissionDenied) || le.GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL ||
			!strings.Contains(le.GetMessage(), "publishing it again failed") {
			t.Fatalf("attachment after a failed repair: %v, want the final PermissionDenied recorded", a)
		}
	})
}

func TestReconcileUnpublishesWhatNoAttachmentHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := volumetest.NewController()
		_, stop := reconcileEnv(t, fake, time.Minute)
		defer stop()
		// The controller also lists v1 on n1 (an unpublish berth gave up
		// on) and a volume that is not berth's.
		fake.Mu.Lock()
		fake.Published["ext-v1"]["csi-n1"] = true
		fake.Published["ext-someone-elses"] = map[string]bool{"csi-n1": true}
		fake.Mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		calls := fake.CallsOf(volumetest.UnpublishMethod)
		want := &csipb.ControllerUnpublishVolumeRequest{VolumeId: "ext-v1", NodeId: "csi-n1", Secrets: map[string]string{"token": "s3cret"}}
		if len(calls) != 1 || !proto.Equal(calls[0].Req, want) {
			t.Fatalf("unpublishes = %v, want only ext-v1 from csi-n1", calls)
		}
		fake.Mu.Lock()
		defer fake.Mu.Unlock()
		if !fake.Published["ext-v1"]["csi-n2"] || fake.Published["ext-v1"]["csi-n1"] || !fake.Published["ext-someone-elses"]["csi-n1"] {
			t.Fatalf("published after the pass: %v, want v1 on csi-n2 only and the other volume left alone", fake.Published)
		}
	})
}

func TestReconcileSkipsControllersThatCannotListPublishedNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		ctl := volumetest.EBSController(true)
		ctl.ControllerInfo.SupportsListPublishedNodes = false
		e.reportPlugins("n1", ctl, volumetest.EBSNode("n1"))
		fake := volumetest.NewController()
		v := e.loops(fake)
		v.cfg.reconcileInterval = time.Minute
		stop := start(v)
		defer stop()
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.ListMethod)); n != 0 {
			t.Fatalf("%d ListVolumes to a controller without LIST_VOLUMES_PUBLISHED_NODES, want 0", n)
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

// TestCallsToOnePluginAreSerialized: two attachments of one plugin wait;
// the first publish hangs, and the second is not sent until the first's
// outcome is written.
func TestCallsToOnePluginAreSerialized(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.registerVolume("v2", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
		e.operatorClaim("c2", "v2", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		fake := volumetest.NewController()
		release := make(chan struct{})
		fake.OnCall = func(context.Context, volumetest.Call) error {
			<-release
			return nil
		}
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if n := len(fake.Calls); n != 1 {
			t.Fatalf("%d calls in flight to plugin ebs, want 1", n)
		}
		close(release)
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		wantState(t, e.attachment("v2", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

func TestPickController(t *testing.T) {
	e := newVolEnv(t)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		e.registerNode(n)
	}
	e.reportPlugins("n1", volumetest.EBSController(true), nil)
	e.reportPlugins("n2", volumetest.EBSController(true), nil)
	e.reportPlugins("n3", volumetest.EBSController(true), nil)
	e.reportPlugins("n4", volumetest.EBSController(false), nil)
	e.reportPlugins("n5", volumetest.EBSController(true), nil)
	e.apply(fsmNodeDown("n5"))
	snap := e.snap()

	for _, tt := range []struct {
		name, prefer, avoid string
		load                map[string]int
		want                string
	}{
		{"the last one used", "n2", "", map[string]int{"n2": 9}, "n2"},
		{"spread: the least loaded", "", "", map[string]int{"n1": 2, "n2": 1, "n3": 1}, "n2"},
		{"ties by node ID", "", "", nil, "n1"},
		{"the preferred one is unhealthy", "n4", "", map[string]int{"n1": 1}, "n2"},
		{"the preferred one is down", "n5", "", nil, "n1"},
		{"the preferred one could not be reached", "n1", "n1", nil, "n2"},
	} {
		got, err := pickControllerFrom(snap, "ebs", CapPublish, tt.prefer, tt.avoid, tt.load)
		if err != nil || got != tt.want {
			t.Errorf("%s: picked %q (%v), want %s", tt.name, got, err, tt.want)
		}
	}

	// Only n1 usable and it is the one to avoid: it is still picked, as
	// the only way to make the call.
	e2 := newVolEnv(t)
	e2.registerNode("n1")
	e2.reportPlugins("n1", volumetest.EBSController(true), nil)
	if got, err := pickControllerFrom(e2.snap(), "ebs", CapPublish, "", "n1", nil); err != nil || got != "n1" {
		t.Errorf("sole controller to avoid: %q (%v), want n1", got, err)
	}

	// None usable: FailedPrecondition, every reason named.
	e3 := newVolEnv(t)
	e3.registerNode("n1")
	e3.registerNode("n2")
	e3.reportPlugins("n1", volumetest.EBSController(false), nil)
	e3.reportPlugins("n2", volumetest.EBSController(true), nil)
	e3.apply(fsmNodeDown("n2"))
	_, err := PickController(e3.snap(), "ebs", CapPublish, "")
	if !errors.Is(err, ErrNoController) || errcode.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "instance on node n1 is unhealthy") || !strings.Contains(err.Error(), "node n2 is NODE_STATUS_DOWN") {
		t.Errorf("no usable controller: %v, want ErrNoController (FailedPrecondition) naming n1 unhealthy and n2 down", err)
	}
	if _, err := PickController(e3.snap(), "nfs", CapPublish, ""); !errors.Is(err, ErrNoController) || !strings.Contains(err.Error(), `plugin "nfs" is not reported by any node`) {
		t.Errorf("unknown plugin: %v, want ErrNoController naming it", err)
	}
}

// fsmNodeDown is the command that marks a node down.
func fsmNodeDown(id string) (fsm.MessageType, proto.Message) {
	return fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: id, Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 1}
}

// TestReconcileReadsEveryPage: the controller lists one volume a page;
// the drift is on the last page, and only that volume is repaired.
func TestReconcileReadsEveryPage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		for _, id := range []string{"v2", "v3"} {
			e.registerVolume(id, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
			e.operatorClaim("c-"+id, id, "n2", pb.ClaimMode_CLAIM_MODE_WRITE)
		}
		fake := volumetest.NewController()
		fake.PageSize = 1
		v := e.loops(fake)
		v.cfg.reconcileInterval = time.Minute
		stop := start(v)
		defer stop()
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 3 {
			t.Fatalf("%d publishes, want 3", n)
		}
		fake.Mu.Lock()
		delete(fake.Published, "ext-v3")
		fake.Mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		// ext-v1 and ext-v2, one page each (ext-v3 is listed nowhere).
		if n := len(fake.CallsOf(volumetest.ListMethod)); n != 2 {
			t.Fatalf("%d ListVolumes, want 2 (a page per listed volume)", n)
		}
		pubs := fake.CallsOf(volumetest.PublishMethod)
		if len(pubs) != 4 || pubs[3].Req.(*csipb.ControllerPublishVolumeRequest).GetVolumeId() != "ext-v3" {
			t.Fatalf("publishes = %v, want the three and ext-v3's repair", pubs)
		}
		if e.attachment("v3", "n2").GetAttempts() != 1 || e.attachment("v1", "n2").GetAttempts() != 0 || e.attachment("v2", "n2").GetAttempts() != 0 {
			t.Fatal("the repair is recorded on v3's attachment only")
		}
		// The drift on a later page: v1 listed first, v2 dropped.
		fake.Mu.Lock()
		fake.Published["ext-v3"] = map[string]bool{"csi-n2": true}
		delete(fake.Published, "ext-v2")
		fake.Mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		if pubs := fake.CallsOf(volumetest.PublishMethod); len(pubs) != 5 || pubs[4].Req.(*csipb.ControllerPublishVolumeRequest).GetVolumeId() != "ext-v2" {
			t.Fatalf("publishes = %v, want ext-v2's repair last", pubs)
		}
	})
}

// TestReconcileKeepsAnAttachmentWhoseNodeInstanceLeft: n2's node plugin
// stops reporting (its CSI node ID leaves the plugin's row) while v1 is
// attached there: the controller's listing of v1 on csi-n2 is the
// attachment's, not an orphan to unpublish.
func TestReconcileKeepsAnAttachmentWhoseNodeInstanceLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := volumetest.NewController()
		e, stop := reconcileEnv(t, fake, time.Minute)
		defer stop()
		e.reportPlugins("n2", nil, nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.ListMethod)); n != 1 {
			t.Fatalf("%d ListVolumes, want 1", n)
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes of an attached volume, want 0", n)
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}
