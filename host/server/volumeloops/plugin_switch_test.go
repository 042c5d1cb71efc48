package volumeloops

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// taskController is a task-launched plugin's controller instance that
// creates volumes and does not publish (kubernetes-csi hostpath's
// defaults): no PUBLISH_UNPUBLISH_VOLUME.
func taskController(alloc string) *pb.CSIPluginInfo {
	return &pb.CSIPluginInfo{Healthy: true, Provider: "hostpath.csi.k8s.io", ProviderVersion: "v1.18.0", AllocId: alloc,
		Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, RequiresControllerPlugin: true,
		ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true}}
}

// The controller picked for a publish advertises PUBLISH_UNPUBLISH_VOLUME:
// of two healthy controllers, n0 (a task plugin that does not publish,
// first by node ID) and n1, the publish goes through n1.
func TestAttachPicksAControllerThatPublishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		e.registerNode("n0")
		e.reportPlugins("n0", taskController("a0"), nil)
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()

		calls := fake.CallsOf(volumetest.PublishMethod)
		if len(calls) != 1 || calls[0].Node != "n1" {
			t.Fatalf("publish calls %s, want one through n1 (n0 does not advertise PUBLISH_UNPUBLISH_VOLUME)", volumetest.DescribeCalls(calls))
		}
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
	})
}

// A call no controller instance can serve is refused before it is made:
// ErrNoCapableController, FailedPrecondition (final), naming the plugin,
// the capability and every instance. An instance that can but is not
// usable makes it ErrNoController (wait for it), still naming the others.
func TestPickControllerNamesTheCapabilityNoInstanceHas(t *testing.T) {
	e := newVolEnv(t)
	e.registerNode("n1")
	e.reportPlugins("n1", taskController("a1"), nil)
	_, err := PickController(e.snap(), "ebs", CapPublish, "")
	if !errors.Is(err, ErrNoCapableController) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("no controller publishes: %v (code %s), want ErrNoCapableController, FailedPrecondition", err, errcode.Code(err))
	}
	for _, want := range []string{`plugin "ebs"`, "PUBLISH_UNPUBLISH_VOLUME", "node n1 (task plugin of alloc a1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got, err := PickController(e.snap(), "ebs", CapCreateDelete, ""); err != nil || got != "n1" {
		t.Errorf("create through the task plugin: %q (%v), want n1", got, err)
	}

	e.registerNode("n2")
	e.reportPlugins("n2", volumetest.EBSController(false), nil)
	_, err = PickController(e.snap(), "ebs", CapPublish, "")
	if !errors.Is(err, ErrNoController) || !strings.Contains(err.Error(), "instance on node n2 is unhealthy") ||
		!strings.Contains(err.Error(), "node n1 (task plugin of alloc a1) does not advertise PUBLISH_UNPUBLISH_VOLUME") {
		t.Errorf("the one that publishes is unhealthy: %v, want ErrNoController naming both", err)
	}
}

// A controller instance never fingerprinted (its first Probe failed: no
// controller_info) may yet publish: a publish waits for it (ErrNoController,
// naming why) rather than failing for good with ErrNoCapableController.
func TestPickControllerWaitsForAnInstanceNotFingerprinted(t *testing.T) {
	e := newVolEnv(t)
	e.registerNode("n1")
	e.reportPlugins("n1", &pb.CSIPluginInfo{Provider: "ebs.csi.aws.com", AllocId: "a1", Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK,
		HealthDescription: "fingerprint: probe: Unavailable"}, nil)
	_, err := PickController(e.snap(), "ebs", CapPublish, "")
	if !errors.Is(err, ErrNoController) || errors.Is(err, ErrNoCapableController) {
		t.Fatalf("publish through a controller not fingerprinted: %v, want ErrNoController (wait)", err)
	}
	if !strings.Contains(err.Error(), "instance on node n1 is not fingerprinted yet") {
		t.Errorf("error %q does not say the instance is not fingerprinted yet", err)
	}
}

// A task-launched plugin replaces a storage adapter of the same ID on n1
// and does not publish. The claim waiting for a publish becomes ready with
// no call; a new claim needs none; the attachment the adapter published is
// removed, with no call the serving plugin cannot answer, when its claim
// is released, and the claim is freed. When the adapter serves again, a
// new claim is published through it.
func TestPluginSwitchFromAdapterToTaskPlugin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newVolEnv(t)
		e.registerNode("n1")
		adapter := volumetest.EBSController(true)
		adapter.Source = pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER
		e.reportPlugins("n1", adapter, volumetest.EBSNode("n1"))
		for _, v := range []string{"v1", "v2", "v3", "v4"} {
			e.registerVolume(v, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
		}
		fake := volumetest.NewController()
		stop := start(e.loops(fake))
		defer stop()
		e.operatorClaim("c1", "v1", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		wantState(t, e.attachment("v1", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

		// A claim the adapter has not published yet: its publish fails
		// uncertain and waits for its retry when the switch comes.
		fake.FailNext(volumetest.PublishMethod, codes.Unavailable)
		e.operatorClaim("c2", "v2", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		wantState(t, e.attachment("v2", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)

		e.reportPlugins("n1", taskController("a1"), volumetest.EBSNode("n1"))
		synctest.Wait()
		if p, _ := e.snap().CSIPluginByID(nil, "ebs"); p.GetControllerRequired() || p.GetProvider() != "hostpath.csi.k8s.io" {
			t.Fatalf("plugin row after the switch: controller_required %v provider %q, want false, the task plugin's", p.GetControllerRequired(), p.GetProvider())
		}
		if c := e.claim("c2"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY || e.attachment("v2", "n1") != nil {
			t.Fatalf("claim c2 %s with attachment %v, want ready with none", pb.EnumWord(c.GetState()), e.attachment("v2", "n1"))
		}
		e.operatorClaim("c3", "v3", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		if c := e.claim("c3"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY || e.attachment("v3", "n1") != nil {
			t.Fatalf("claim c3 %s with attachment %v, want ready with none", pb.EnumWord(c.GetState()), e.attachment("v3", "n1"))
		}
		if n := len(fake.CallsOf(volumetest.PublishMethod)); n != 2 {
			t.Fatalf("%d publishes, want the two made through the adapter: %v", n, fake.Methods())
		}

		e.release("c1", "n1")
		synctest.Wait()
		if a := e.attachment("v1", "n1"); a != nil {
			t.Fatalf("attachment v1/n1 after its claim left: %v, want removed", a)
		}
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim c1 after release: %v, want freed", c)
		}
		if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes sent to a plugin that does not advertise them", n)
		}

		e.reportPlugins("n1", adapter, volumetest.EBSNode("n1"))
		e.operatorClaim("c4", "v4", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		wantState(t, e.attachment("v4", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if c := e.claim("c4"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c4 %s, want ready", pb.EnumWord(c.GetState()))
		}
	})
}

// Volume create goes through a controller that advertises
// CREATE_DELETE_VOLUME (not the first healthy one by node ID, which does
// not), and an uncertain failure of the call (Unavailable: the instance
// the node served it from went away while the plugin ID switched
// instances) is retried through the same instance:
// CreateVolume is idempotent by name. A final failure is not retried.
// No controller of the plugin creates volumes: refused at once, final
// (FailedPrecondition), naming the plugin, the capability and the node.
// The switch is applied while the adapter's ControllerPublishVolume is in
// flight; the call then fails (the node routes it to the task plugin now:
// Unimplemented). Its failure record must not create the attachment again,
// and a later claim on the volume and node is ready with no publish.
func TestPluginSwitchDuringAnInFlightPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newVolEnv(t)
		e.registerNode("n1")
		adapter := volumetest.EBSController(true)
		adapter.Source = pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER
		e.reportPlugins("n1", adapter, volumetest.EBSNode("n1"))
		e.registerVolume("v1", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
		fake := volumetest.NewController()
		fake.OnCall = func(ctx context.Context, c volumetest.Call) error {
			if c.Method == volumetest.PublishMethod {
				e.reportPlugins("n1", taskController("a1"), volumetest.EBSNode("n1"))
				return status.Error(codes.Unimplemented, "task plugin does not publish")
			}
			return nil
		}
		stop := start(e.loops(fake))
		defer stop()
		e.operatorClaim("c1", "v1", "n1", pb.ClaimMode_CLAIM_MODE_READ)
		synctest.Wait()
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Errorf("claim c1 %s, want ready (the switch skipped its publish)", pb.EnumWord(c.GetState()))
		}
		if a := e.attachment("v1", "n1"); a != nil {
			t.Errorf("attachment %v after the failed publish, want none", a)
		}
		fake.OnCall = nil
		e.operatorClaim("c2", "v1", "n1", pb.ClaimMode_CLAIM_MODE_READ)
		synctest.Wait()
		if c := e.claim("c2"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Errorf("claim c2 %s with attachment %v, want ready (the plugin no longer requires a publish)", pb.EnumWord(c.GetState()), e.attachment("v1", "n1"))
		}
	})
}

// An uncertain CreateVolume is not retried through another instance of the
// plugin ID: here a task plugin (alloc a9) replaces the instance on n1
// during the backoff. The create fails with ErrCreateControllerChanged
// naming the instance the first call went to (it may have made the volume
// on its backend), and no second CreateVolume is sent.
// When an update turns a plugin to not requiring the controller publish,
// the publishes it skips are logged for the operator: the plugin, and each
// attachment removed with its volume and node.
