package volumeloops

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/rpc/pb"
)

func TestAttachPublishesThroughTheControllerAndReadiesTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()

		calls := fake.CallsOf(volumetest.PublishMethod)
		if len(calls) != 1 {
			t.Fatalf("publish calls = %s, want 1", volumetest.DescribeCalls(calls))
		}
		want := &csipb.ControllerPublishVolumeRequest{
			VolumeId: "ext-v1", NodeId: "csi-n2",
			VolumeCapability: &csipb.VolumeCapability{
				AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"noatime"}}},
			},
			Secrets: map[string]string{"token": "s3cret"}, VolumeContext: map[string]string{"zone": "a"},
		}
		if calls[0].Node != "n1" || calls[0].Plugin != "ebs" || !proto.Equal(calls[0].Req, want) {
			t.Fatalf("publish = %s on %s/%s, want %v through n1/ebs", calls[0].Req, calls[0].Node, calls[0].Plugin, want)
		}
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if a.GetControllerNodeId() != "n1" || !maps.Equal(a.GetPublishContext(), map[string]string{"lun": "3"}) || a.GetLastError() != nil {
			t.Fatalf("attachment = %v, want controller n1, publish context lun=3, no error", a)
		}
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c1 is %s, want ready", pb.EnumWord(c.GetState()))
		}
		// Nothing more to do: an hour later, still one call.
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(fake.Calls); n != 1 {
			t.Fatalf("%d calls after the publish, want 1: %v", n, fake.Methods())
		}
	})
}

func TestAttachRetriesUncertainErrorsWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.PublishMethod, codes.Unavailable, codes.DeadlineExceeded)
		v := e.loops(fake)
		stop := start(v)
		defer stop()
		t0 := time.Now()
		synctest.Wait()

		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
		le := a.GetLastError()
		if a.GetAttempts() != 1 || le.GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN || le.GetCode() != pb.GrpcCode(codes.Unavailable) {
			t.Fatalf("after the first failure: %v, want attempts 1, uncertain Unavailable", a)
		}
		// Backoff with zero jitter: 0.8 × 1 s, then 0.8 × 2 s.
		if got := time.Unix(0, a.GetNextRetryAt()).Sub(t0); got != 800*time.Millisecond {
			t.Fatalf("next retry %s after the failure, want 800ms", got)
		}
		for _, s := range []string{"v1", "n2", "ext-v1", "Unavailable"} {
			if !strings.Contains(le.GetMessage(), s) {
				t.Fatalf("error %q does not name %s", le.GetMessage(), s)
			}
		}
		time.Sleep(799 * time.Millisecond)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 1 {
			t.Fatalf("%d publishes before the retry is due, want 1", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		a = e.attachment("v1", "n2")
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 || a.GetAttempts() != 2 || a.GetLastError().GetCode() != pb.GrpcCode(codes.DeadlineExceeded) {
			t.Fatalf("after the retry: %d publishes, attachment %v; want 2, attempts 2, DeadlineExceeded", n, a)
		}
		if got := time.Until(time.Unix(0, a.GetNextRetryAt())); got != 1600*time.Millisecond {
			t.Fatalf("second backoff %s, want 1.6s", got)
		}
		time.Sleep(1600 * time.Millisecond)
		synctest.Wait()
		a = e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 3 || a.GetAttempts() != 0 || a.GetLastError() != nil {
			t.Fatalf("after success: %d publishes, attachment %v; want 3, the error cleared", n, a)
		}
	})
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	v := &Loops{cfg: defaultVolumeLoopConfig(), jitter: func() float64 { return 0.999999 }}
	if got := v.backoff(1); got < 1190*time.Millisecond || got > 1200*time.Millisecond {
		t.Errorf("backoff(1) with the highest jitter = %s, want just under 1.2s", got)
	}
	if got := v.backoff(30); got != v.cfg.retryMax {
		t.Errorf("backoff(30) = %s, want the cap %s", got, v.cfg.retryMax)
	}
	v.jitter = func() float64 { return 0 }
	if got := v.backoff(4); got != time.Duration(0.8*float64(8*time.Second)) {
		t.Errorf("backoff(4) with no jitter = %s, want 0.8 × 8s", got)
	}
}

func TestAttachFinalErrorSurfacesAndWaitsForAChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.PublishMethod, codes.InvalidArgument)
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()

		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
		if a.GetAttempts() != 1 || a.GetNextRetryAt() != 0 || a.GetLastError().GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL ||
			a.GetLastError().GetCode() != pb.GrpcCode(codes.InvalidArgument) || a.GetControllerNodeId() != "n1" {
			t.Fatalf("after a final error: %v, want attempts 1, final InvalidArgument, no retry, controller n1", a)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 1 {
			t.Fatalf("%d publishes an hour after a final error, want 1 (not retried until something changes)", n)
		}
		// Something changes: a second controller instance appears (the
		// plugin's row changes). The call is made again.
		e.registerNode("n3")
		e.reportPlugins("n3", volumetest.EBSController(true), nil)
		synctest.Wait()
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 {
			t.Fatalf("%d publishes after the plugin changed, want 2", n)
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

func TestAttachNoControllerIsRecordedAndRetriedWhenOneAppears(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.reportPlugins("n1", volumetest.EBSController(false), volumetest.EBSNode("n1"))
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		a := e.attachment("v1", "n2")
		if len(fake.Calls) != 0 || a.GetLastError().GetCode() != pb.GrpcCode(codes.FailedPrecondition) || !strings.Contains(a.GetLastError().GetMessage(), `plugin "ebs"`) ||
			!strings.Contains(a.GetLastError().GetMessage(), "unhealthy") {
			t.Fatalf("with no healthy controller: calls %v, attachment %v; want no call, FailedPrecondition naming the plugin", fake.Methods(), a)
		}
		e.reportPlugins("n1", volumetest.EBSController(true), volumetest.EBSNode("n1"))
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

func TestAttachMovesToAnotherControllerWhenItsNodeIsUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.registerNode("n3")
		e.reportPlugins("n3", volumetest.EBSController(true), nil)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.PublishMethod, codes.Unavailable)
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if a := e.attachment("v1", "n2"); a.GetControllerNodeId() != "n1" || a.GetAttempts() != 1 {
			t.Fatalf("after the first try: %v, want controller n1 recorded with attempt 1", a)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		calls := fake.CallsOf(volumetest.PublishMethod)
		if len(calls) != 2 || calls[0].Node != "n1" || calls[1].Node != "n3" {
			t.Fatalf("publishes = %s, want n1 (unreachable) then n3", volumetest.DescribeCalls(calls))
		}
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if a.GetControllerNodeId() != "n3" {
			t.Fatalf("attached through %s, want n3", a.GetControllerNodeId())
		}
	})
}

func TestAttachFollowsTheControllerToItsNewNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.PublishMethod, codes.Aborted)
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		// The controller moves: n1's instance goes, n3 runs one.
		e.reportPlugins("n1", nil, volumetest.EBSNode("n1"))
		e.registerNode("n3")
		e.reportPlugins("n3", volumetest.EBSController(true), nil)
		time.Sleep(time.Second)
		synctest.Wait()
		calls := fake.CallsOf(volumetest.PublishMethod)
		if len(calls) != 2 || calls[1].Node != "n3" {
			t.Fatalf("publishes = %s, want the retry through n3", volumetest.DescribeCalls(calls))
		}
		if a := e.attachment("v1", "n2"); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED || a.GetControllerNodeId() != "n3" {
			t.Fatalf("attachment = %v, want attached through n3", a)
		}
	})
}

func TestDetachUnpublishesOnceAndFreesTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail []codes.Code
	}{
		{"ok", nil},
		{"not found is success", []codes.Code{codes.NotFound}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEBSEnv(t)
				fake := volumetest.NewController()
				fake.FailNext(volumetest.UnpublishMethod, tc.fail...)
				stop := start(e.loops(fake))
				defer stop()
				synctest.Wait()
				wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

				// Released but not yet detached by its client: nothing to do.
				e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
				synctest.Wait()
				if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
					t.Fatalf("%d unpublishes while the claim is releasing, want 0", n)
				}
				e.apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: "n2"}}})
				synctest.Wait()
				calls := fake.CallsOf(volumetest.UnpublishMethod)
				want := &csipb.ControllerUnpublishVolumeRequest{VolumeId: "ext-v1", NodeId: "csi-n2", Secrets: map[string]string{"token": "s3cret"}}
				if len(calls) != 1 || calls[0].Node != "n1" || !proto.Equal(calls[0].Req, want) {
					t.Fatalf("unpublishes = %s, want one %v through n1", volumetest.DescribeCalls(calls), want)
				}
				if a := e.attachment("v1", "n2"); a != nil {
					t.Fatalf("attachment after the unpublish: %v, want removed", a)
				}
				if c := e.claim("c1"); c != nil {
					t.Fatalf("claim after the detach: %v, want freed", c)
				}
				time.Sleep(time.Hour)
				synctest.Wait()
				if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
					t.Fatalf("%d unpublishes for one detach, want 1", n)
				}
			})
		})
	}
}

func TestDetachGoesBeforeAttachInOnePlugin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.registerVolume("v2", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
		// v1 was attached by an earlier leader, and is now detaching; v2's
		// attachment waits: both are due when the loops start.
		e.apply(fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n2", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, ControllerNodeId: "n1"})
		e.release("c1", "n2")
		e.operatorClaim("c2", "v2", "n2", pb.ClaimMode_CLAIM_MODE_WRITE)
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_DETACHING)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if got := fake.Methods(); len(got) != 2 || got[0] != "ControllerUnpublishVolume" || got[1] != "ControllerPublishVolume" {
			t.Fatalf("calls = %v, want the unpublish of v1, then the publish of v2", got)
		}
		if e.attachment("v1", "n2") != nil {
			t.Fatal("v1's attachment is still there")
		}
		wantState(t, e.attachment("v2", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

// An attachment that never recorded the CSI node ID it was published to
// (attached by a server before csi_node_id) whose node is gone: removed
// without a call, left to the reconcile pass.
func TestDetachOfAGoneNodeDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.apply(fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n2", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, ControllerNodeId: "n1"})
		e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
		// n2 is deregistered (garbage-collected) with the claim releasing:
		// its client will never report, and its CSI node ID is gone.
		e.apply(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n2"})
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if e.claim("c1") != nil || e.attachment("v1", "n2") != nil {
			t.Fatalf("claim %v, attachment %v: want both gone (forced, detached without a call)", e.claim("c1"), e.attachment("v1", "n2"))
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes for a node nobody knows, want 0 (left to the reconcile pass)", n)
		}
	})
}

// TestNewLeaderResumesAPublishWithoutDoubling: a leader whose publish
// was made but whose write did not commit loses leadership; the next
// leader publishes again (once) and records it. A leader whose write did
// commit leaves nothing for the next: it makes no call.
func TestNewLeaderResumesAPublishWithoutDoubling(t *testing.T) {
	t.Run("write lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEBSEnv(t)
			fake := volumetest.NewController()
			e.setFailWrite(lostLeadership)
			stop1 := start(e.loops(fake))
			synctest.Wait()
			if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 1 {
				t.Fatalf("first leader made %d publishes, want 1", n)
			}
			stop1()
			wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)

			e.setFailWrite(nil)
			stop2 := start(e.loops(fake))
			defer stop2()
			synctest.Wait()
			time.Sleep(time.Hour)
			synctest.Wait()
			if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 {
				t.Fatalf("%d publishes in all, want 2 (one per leader)", n)
			}
			wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		})
	})
	t.Run("write committed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEBSEnv(t)
			fake := volumetest.NewController()
			// The write commits, then the leadership ends: every later
			// write of the first leader fails.
			e.setFailWrite(func(mt fsm.MessageType, msg proto.Message) error {
				e.failWrite = lostLeadership
				return nil
			})
			stop1 := start(e.loops(fake))
			synctest.Wait()
			stop1()
			wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
			e.setFailWrite(nil)
			stop2 := start(e.loops(fake))
			defer stop2()
			synctest.Wait()
			time.Sleep(time.Hour)
			synctest.Wait()
			if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 1 {
				t.Fatalf("%d publishes in all, want 1: the new leader found it attached", n)
			}
		})
	})
	t.Run("call in flight when leadership ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			e := newEBSEnv(t)
			fake := volumetest.NewController()
			fake.OnCall = func(ctx context.Context, c volumetest.Call) error {
				<-ctx.Done() // the plugin hangs until the caller leaves
				return ctx.Err()
			}
			stop1 := start(e.loops(fake))
			synctest.Wait()
			stop1() // returns only once the call ended: nothing written
			a := e.attachment("v1", "n2")
			if a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING || a.GetAttempts() != 0 {
				t.Fatalf("after the leadership ended mid-call: %v, want attaching with nothing recorded", a)
			}
			fake.Mu.Lock()
			fake.OnCall = nil
			fake.Mu.Unlock()
			stop2 := start(e.loops(fake))
			defer stop2()
			synctest.Wait()
			wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
			if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 {
				t.Fatalf("%d publishes, want 2 (the abandoned one and the new leader's)", n)
			}
		})
	})
}

// A node whose node instance of the plugin has not reported (its CSI node
// ID is unknown) cannot be published to: a final FailedPrecondition naming
// the volume, the node and the plugin, made again once the node reports.
func TestAttachWaitsForTheNodesCSINodeID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.reportPlugins("n2", nil, nil)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		a := e.attachment("v1", "n2")
		le := a.GetLastError()
		if len(fake.Calls) != 0 || le.GetCode() != pb.GrpcCode(codes.FailedPrecondition) || le.GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL {
			t.Fatalf("without n2's node instance: calls %v, attachment %v; want no call, a final FailedPrecondition", fake.Methods(), a)
		}
		for _, s := range []string{"volume v1", "node n2", `plugin "ebs"`, "CSI node ID is unknown"} {
			if !strings.Contains(le.GetMessage(), s) {
				t.Fatalf("error %q does not say %q", le.GetMessage(), s)
			}
		}
		e.reportPlugins("n2", nil, volumetest.EBSNode("n2"))
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if calls := fake.CallsOf(volumetest.PublishMethod); len(calls) != 1 || calls[0].Req.(*csipb.ControllerPublishVolumeRequest).GetNodeId() != "csi-n2" {
			t.Fatalf("publishes = %v, want one to csi-n2", calls)
		}
	})
}

// The node is collected after the publish: the unpublish still runs,
// naming the CSI node ID the publish named.
func TestDetachOfAGoneNodeUnpublishesWithTheRecordedCSINodeID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if a := e.attachment("v1", "n2"); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED || a.GetCsiNodeId() != "csi-n2" {
			t.Fatalf("attachment %v, want attached with csi_node_id csi-n2", a)
		}
		e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
		e.apply(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n2"})
		synctest.Wait()
		if e.claim("c1") != nil || e.attachment("v1", "n2") != nil {
			t.Fatalf("claim %v, attachment %v: want both gone", e.claim("c1"), e.attachment("v1", "n2"))
		}
		want := &csipb.ControllerUnpublishVolumeRequest{VolumeId: "ext-v1", NodeId: "csi-n2", Secrets: map[string]string{"token": "s3cret"}}
		if calls := fake.CallsOf(volumetest.UnpublishMethod); len(calls) != 1 || !proto.Equal(calls[0].Req, want) {
			t.Fatalf("unpublishes = %v, want one %v", calls, want)
		}
	})
}

// A publish that failed uncertain may have happened: the CSI node ID it
// named is kept, and the detach of the never-attached attachment
// unpublishes there.
func TestDetachAfterAnUncertainPublishUnpublishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.PublishMethod, codes.DeadlineExceeded)
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		if a := e.attachment("v1", "n2"); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING || a.GetCsiNodeId() != "csi-n2" {
			t.Fatalf("attachment %v, want attaching with csi_node_id csi-n2", a)
		}
		e.release("c1", "n2")
		synctest.Wait()
		if e.attachment("v1", "n2") != nil || e.claim("c1") != nil {
			t.Fatal("attachment or claim left after the detach")
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 1 {
			t.Fatalf("%d unpublishes, want 1", n)
		}
	})
}

// An attachment whose publish was never made (its node had no node
// instance of the plugin, so its CSI node ID was never known or recorded)
// detaches after its claim is released. While the node is ready it waits
// for the node's plugin (a final error naming what is missing); once the
// node is down, no unpublish can be made and none is needed: it is removed
// without a call, the claim is freed, and the volume can be deregistered.
func TestDetachWithoutACSINodeIDOfANodeThatIsDown(t *testing.T) {
	for _, off := range []string{"down", "fenced"} {
		t.Run(off, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEBSEnv(t)
				e.reportPlugins("n2", nil, nil)
				fake := volumetest.NewController()
				stop := start(e.loops(fake))
				defer stop()
				synctest.Wait()
				if a := e.attachment("v1", "n2"); a.GetCsiNodeId() != "" || a.GetLastError() == nil {
					t.Fatalf("attachment %v, want attaching with an error and no csi_node_id", a)
				}
				e.release("c1", "n2")
				synctest.Wait()
				a := e.attachment("v1", "n2")
				wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_DETACHING)
				if le := a.GetLastError(); le.GetCode() != pb.GrpcCode(codes.FailedPrecondition) || !strings.Contains(le.GetMessage(), "CSI node ID is unknown") ||
					!strings.Contains(le.GetMessage(), "down or fenced") {
					t.Fatalf("detaching on a ready node without the plugin: error %v, want FailedPrecondition naming the missing CSI node ID", le)
				}
				if _, err := e.propose(context.Background(), fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "v1"}); err == nil {
					t.Fatal("volume deregistered with its attachment still detaching")
				}

				if off == "down" {
					e.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n2", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: time.Now().UnixNano()})
				} else {
					e.apply(fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "n2", Fenced: true, UpdatedAt: time.Now().UnixNano()})
				}
				synctest.Wait()
				if e.attachment("v1", "n2") != nil || e.claim("c1") != nil {
					t.Fatalf("node %s: attachment %v, claim %v; want both gone", off, e.attachment("v1", "n2"), e.claim("c1"))
				}
				if n := len(fake.Calls); n != 0 {
					t.Fatalf("%d controller calls (%s), want none: no publish was ever made", n, volumetest.DescribeCalls(fake.Calls))
				}
				e.apply(fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "v1"})
			})
		})
	}
}

// A node's attachment is published read-only only where no writer can
// join its readers later: a single-node-writer volume first claimed by a
// reader is attached writable (the reader's own publish on the node is
// read-only), so a writer placed beside it can write. It was attached
// read-only, and the writer, its claim in use, got a read-only volume.
func TestAttachIsReadOnlyOnlyWhereNoWriterCanJoin(t *testing.T) {
	read, write := pb.ClaimMode_CLAIM_MODE_READ, pb.ClaimMode_CLAIM_MODE_WRITE
	for _, tc := range []struct {
		access pb.VolumeAccessMode
		claims []pb.ClaimMode
		want   bool
	}{
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, []pb.ClaimMode{read}, false},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, []pb.ClaimMode{read, write}, false},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, []pb.ClaimMode{write}, false},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER, []pb.ClaimMode{read, read}, false},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER, []pb.ClaimMode{read}, false},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_READER_ONLY, []pb.ClaimMode{read}, true},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_READER_ONLY, []pb.ClaimMode{read, read}, true},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER, []pb.ClaimMode{read}, false},
		{pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_SINGLE_WRITER, []pb.ClaimMode{read, write}, false},
	} {
		e := newVolEnv(t)
		e.registerNode("n1")
		e.reportPlugins("n1", volumetest.EBSController(true), volumetest.EBSNode("n1"))
		e.registerVolume("v1", tc.access)
		for i, mode := range tc.claims {
			e.apply(fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{
				Id: fmt.Sprintf("c%d", i), VolumeId: "v1", NodeId: "n1", Mode: mode,
				AccessMode: tc.access, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
			}})
		}
		req, err := publishRequest(e.snap(), e.attachment("v1", "n1"))
		if err != nil {
			t.Fatalf("%s with claims %v: %v", pb.EnumWord(tc.access), tc.claims, err)
		}
		if req.GetReadonly() != tc.want {
			t.Errorf("%s with claims %v: controller publish read-only %v, want %v", pb.EnumWord(tc.access), tc.claims, req.GetReadonly(), tc.want)
		}
	}
}

// A final failure waits for a change of what it depends on made after the
// state its step was decided on, not after the failure was written: a
// controller that became healthy between the two (here, applied just
// before the failure's write) still gets the publish retried. Compared
// with the failure's own index, that change was older, and the publish
// waited for good (seen in TestVolumeMove: a drain moved the controller to
// the other client while the publish to it failed for want of one).
func TestAttachFinalFailureSeesAChangeMadeWhileItWasDecided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.reportPlugins("n1", volumetest.EBSController(false), volumetest.EBSNode("n1"))
		fake := volumetest.NewController()
		l := e.loops(fake)
		propose, healed := l.propose, false
		l.propose = func(ctx context.Context, typ fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
			if cmd, ok := msg.(*pb.AttachmentUpdateCommand); ok && cmd.GetError() != nil && !healed {
				healed = true
				e.reportPlugins("n1", volumetest.EBSController(true), volumetest.EBSNode("n1"))
			}
			return propose(ctx, typ, msg)
		}
		stop := start(l)
		defer stop()
		synctest.Wait()
		if !healed {
			t.Fatal("no failure was written: the step did not fail for want of a healthy controller")
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if calls := fake.CallsOf(volumetest.PublishMethod); len(calls) != 1 {
			t.Fatalf("publish calls = %s, want 1", volumetest.DescribeCalls(calls))
		}
	})
}

// A publish is addressed to the controller instance the servers' state
// shows on the picked node. A node that serves the plugin ID with another
// instance by then (its report not applied yet) refuses it, marked
// csi.ErrControllerInstanceChanged: no call was made, and the step is
// not a final failure but uncertain, tried again on the backoff through
// the controller picked then.
func TestAttachRefusedForAnotherInstanceIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.Mu.Lock()
		fake.Errs[volumetest.PublishMethod] = []error{csi.InstanceChangedStatus(fmt.Errorf("csi plugin %q on node n1: %w: addressed to the storage adapter, served by the task plugin of alloc a9",
			"ebs", csi.ErrControllerInstanceChanged))}
		fake.Mu.Unlock()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()

		calls := fake.CallsOf(volumetest.PublishMethod)
		p, err := e.snap().CSIPluginByID(nil, "ebs")
		if err != nil {
			t.Fatal(err)
		}
		want := csi.InstanceOf(p.GetControllers()["n1"])
		if len(calls) != 1 || !proto.Equal(calls[0].Expect, want) {
			t.Fatalf("publish calls %s, want one addressed to %v", volumetest.DescribeCalls(calls), want)
		}
		a := e.attachment("v1", "n2")
		wantState(t, a, pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)
		le := a.GetLastError()
		if le.GetClass() != pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN || a.GetNextRetryAt() == 0 || !strings.Contains(le.GetMessage(), "alloc a9") {
			t.Fatalf("after the refusal: %v, want an uncertain error naming the instance serving, with a retry time", a)
		}
		time.Sleep(time.Until(time.Unix(0, a.GetNextRetryAt())))
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 {
			t.Fatalf("%d publishes, want 2", n)
		}
	})
}
