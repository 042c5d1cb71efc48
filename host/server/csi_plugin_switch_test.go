package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
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
		fake := newFakeController()
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()

		calls := fake.callsOf(publishMethod)
		if len(calls) != 1 || calls[0].node != "n1" {
			t.Fatalf("publish calls %s, want one through n1 (n0 does not advertise PUBLISH_UNPUBLISH_VOLUME)", describeCalls(calls))
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
	_, err := pickController(e.snap(), "ebs", capPublish, "")
	if !errors.Is(err, ErrNoCapableController) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("no controller publishes: %v (code %s), want ErrNoCapableController, FailedPrecondition", err, errcode.Code(err))
	}
	for _, want := range []string{`plugin "ebs"`, "PUBLISH_UNPUBLISH_VOLUME", "node n1 (task plugin of alloc a1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got, err := pickController(e.snap(), "ebs", capCreateDelete, ""); err != nil || got != "n1" {
		t.Errorf("create through the task plugin: %q (%v), want n1", got, err)
	}

	e.registerNode("n2")
	e.reportPlugins("n2", ebsController(false), nil)
	_, err = pickController(e.snap(), "ebs", capPublish, "")
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
	_, err := pickController(e.snap(), "ebs", capPublish, "")
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
		adapter := ebsController(true)
		adapter.Source = pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER
		e.reportPlugins("n1", adapter, ebsNode("n1"))
		for _, v := range []string{"v1", "v2", "v3", "v4"} {
			e.registerVolume(v, pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
		}
		fake := newFakeController()
		stop := start(e.loops(fake))
		defer stop()
		e.operatorClaim("c1", "v1", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		wantState(t, e.attachment("v1", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)

		// A claim the adapter has not published yet: its publish fails
		// uncertain and waits for its retry when the switch comes.
		fake.failNext(publishMethod, codes.Unavailable)
		e.operatorClaim("c2", "v2", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		wantState(t, e.attachment("v2", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHING)

		e.reportPlugins("n1", taskController("a1"), ebsNode("n1"))
		synctest.Wait()
		if p, _ := e.snap().CSIPluginByID(nil, "ebs"); p.GetControllerRequired() || p.GetProvider() != "hostpath.csi.k8s.io" {
			t.Fatalf("plugin row after the switch: controller_required %v provider %q, want false, the task plugin's", p.GetControllerRequired(), p.GetProvider())
		}
		if c := e.claim("c2"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY || e.attachment("v2", "n1") != nil {
			t.Fatalf("claim c2 %s with attachment %v, want ready with none", fsm.ClaimStateWord(c.GetState()), e.attachment("v2", "n1"))
		}
		e.operatorClaim("c3", "v3", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		if c := e.claim("c3"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY || e.attachment("v3", "n1") != nil {
			t.Fatalf("claim c3 %s with attachment %v, want ready with none", fsm.ClaimStateWord(c.GetState()), e.attachment("v3", "n1"))
		}
		if n := len(fake.callsOf(publishMethod)); n != 2 {
			t.Fatalf("%d publishes, want the two made through the adapter: %v", n, fake.methods())
		}

		e.release("c1", "n1")
		synctest.Wait()
		if a := e.attachment("v1", "n1"); a != nil {
			t.Fatalf("attachment v1/n1 after its claim left: %v, want removed", a)
		}
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim c1 after release: %v, want freed", c)
		}
		if n := len(fake.callsOf(unpublishMethod)); n != 0 {
			t.Fatalf("%d unpublishes sent to a plugin that does not advertise them", n)
		}

		e.reportPlugins("n1", adapter, ebsNode("n1"))
		e.operatorClaim("c4", "v4", "n1", pb.ClaimMode_CLAIM_MODE_WRITE)
		synctest.Wait()
		wantState(t, e.attachment("v4", "n1"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		if c := e.claim("c4"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Fatalf("claim c4 %s, want ready", fsm.ClaimStateWord(c.GetState()))
		}
	})
}

// Volume create goes through a controller that advertises
// CREATE_DELETE_VOLUME (not the first healthy one by node ID, which does
// not), and an uncertain failure of the call (Unavailable: the instance
// the node served it from went away while the plugin ID switched
// instances, the 503 of issue 19) is retried through the same instance:
// CreateVolume is idempotent by name. A final failure is not retried.
func TestVolumeCreatePicksAControllerThatCreatesAndRetriesUncertainFailuresThroughIt(t *testing.T) {
	p := csifake.New()
	tc, s, vols, _, _ := volumeCluster(t, p)
	first := testNode("n0")
	first.Id = "00000000-0000-0000-0000-000000000000"
	if _, err := tc.register(s, first); err != nil {
		t.Fatal(err)
	}
	p0 := csifake.New()
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: first.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.berth.dev", ProviderVersion: "1.0", ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true}}}})
	connectCSINode(t, first.GetId(), "hp", p0, s)

	v := fsVolume("db")
	v.ExternalId = ""
	p.CreateVolume.Next(nil, status.Error(codes.Unavailable, "no controller instance of the csi plugin on this node"))
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db"}}, nil)
	type result struct {
		resp *pb.VolumeRegisterResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
		done <- result{resp, err}
	}()
	// The retry's backoff runs on the server's clock: moved on in small
	// steps until the create answers.
	var r result
	testutil.WaitFor(t, 10*time.Second, func() error {
		select {
		case r = <-done:
			return nil
		default:
			tc.clock.Advance(100 * time.Millisecond)
			return errors.New("the create has not answered")
		}
	})
	resp, err := r.resp, r.err
	if err != nil {
		t.Fatalf("create: %v (calls: %d on the controller that creates, %d on the one that does not)", err, p.CreateVolume.Count(), p0.CreateVolume.Count())
	}
	if resp.GetVolume().GetExternalId() != "ext-db" || p.CreateVolume.Count() != 2 || p0.CreateVolume.Count() != 0 {
		t.Fatalf("created %v with %d calls on the controller that creates and %d on the one that does not, want ext-db, 2 and 0",
			resp.GetVolume(), p.CreateVolume.Count(), p0.CreateVolume.Count())
	}

	// A final failure is not retried.
	p.CreateVolume.Next(nil, status.Error(codes.InvalidArgument, "bad parameters"))
	v2 := fsVolume("db2")
	v2.ExternalId = ""
	if _, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v2}); status.Code(err) != codes.InvalidArgument || p.CreateVolume.Count() != 3 {
		t.Fatalf("final failure: %v after %d calls, want InvalidArgument after one more (3)", err, p.CreateVolume.Count())
	}
}

// No controller of the plugin creates volumes: refused at once, final
// (FailedPrecondition), naming the plugin, the capability and the node.
func TestVolumeCreateWithNoControllerThatCreates(t *testing.T) {
	p := csifake.New()
	tc, s, vols, n, _ := volumeCluster(t, p)
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: fsVolume("old")}); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, AllocId: "a1", ControllerInfo: &pb.CSIControllerInfo{SupportsListVolumes: true}}},
		Nodes:       map[string]*pb.CSIPluginInfo{"hp": {Healthy: true}}})
	v := fsVolume("db")
	v.ExternalId = ""
	_, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
	if status.Code(err) != codes.FailedPrecondition || p.CreateVolume.Count() != 0 {
		t.Fatalf("create with no controller that creates: %v after %d calls, want FailedPrecondition and no call", err, p.CreateVolume.Count())
	}
	for _, want := range []string{`volume "db"`, `"hp"`, "CREATE_DELETE_VOLUME", "node " + n.GetId() + " (task plugin of alloc a1)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// A delete says what the operator can do instead.
	_, err = vols.Delete(ctx10s(t), &pb.VolumeDeleteRequest{VolumeId: "old"})
	if status.Code(err) != codes.FailedPrecondition || p.DeleteVolume.Count() != 0 {
		t.Fatalf("delete with no controller that deletes: %v after %d calls, want FailedPrecondition and no call", err, p.DeleteVolume.Count())
	}
	for _, want := range []string{`volume "old"`, "CREATE_DELETE_VOLUME", "deregister it instead"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("delete error %q does not name %q", err, want)
		}
	}
}

// The switch is applied while the adapter's ControllerPublishVolume is in
// flight; the call then fails (the node routes it to the task plugin now:
// Unimplemented). Its failure record must not create the attachment again,
// and a later claim on the volume and node is ready with no publish.
func TestPluginSwitchDuringAnInFlightPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newVolEnv(t)
		e.registerNode("n1")
		adapter := ebsController(true)
		adapter.Source = pb.CSIPluginSource_CSI_PLUGIN_SOURCE_ADAPTER
		e.reportPlugins("n1", adapter, ebsNode("n1"))
		e.registerVolume("v1", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
		fake := newFakeController()
		fake.onCall = func(ctx context.Context, c fakeCall) error {
			if c.method == publishMethod {
				e.reportPlugins("n1", taskController("a1"), ebsNode("n1"))
				return status.Error(codes.Unimplemented, "task plugin does not publish")
			}
			return nil
		}
		stop := start(e.loops(fake))
		defer stop()
		e.operatorClaim("c1", "v1", "n1", pb.ClaimMode_CLAIM_MODE_READ)
		synctest.Wait()
		if c := e.claim("c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Errorf("claim c1 %s, want ready (the switch skipped its publish)", fsm.ClaimStateWord(c.GetState()))
		}
		if a := e.attachment("v1", "n1"); a != nil {
			t.Errorf("attachment %v after the failed publish, want none", a)
		}
		fake.onCall = nil
		e.operatorClaim("c2", "v1", "n1", pb.ClaimMode_CLAIM_MODE_READ)
		synctest.Wait()
		if c := e.claim("c2"); c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
			t.Errorf("claim c2 %s with attachment %v, want ready (the plugin no longer requires a publish)", fsm.ClaimStateWord(c.GetState()), e.attachment("v1", "n1"))
		}
	})
}

// An uncertain CreateVolume is not retried through another instance of the
// plugin ID: here a task plugin (alloc a9) replaces the instance on n1
// during the backoff. The create fails with ErrCreateControllerChanged
// naming the instance the first call went to (it may have made the volume
// on its backend), and no second CreateVolume is sent.
func TestVolumeCreateIsNotRetriedThroughAnotherInstance(t *testing.T) {
	p := csifake.New()
	tc, s, vols, n, _ := volumeCluster(t, p)
	v := fsVolume("db")
	v.ExternalId = ""
	p.CreateVolume.Next(nil, status.Error(codes.DeadlineExceeded, "timed out"))
	done := make(chan error, 1)
	go func() {
		_, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if p.CreateVolume.Count() != 1 {
			return errors.New("no CreateVolume yet")
		}
		return nil
	})
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.csi.k8s.io", AllocId: "a9",
			Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true}}},
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.csi.k8s.io", AllocId: "a9", Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK}},
	})
	var err error
	testutil.WaitFor(t, 10*time.Second, func() error {
		select {
		case err = <-done:
			return nil
		default:
			tc.clock.Advance(100 * time.Millisecond)
			return errors.New("the create has not answered")
		}
	})
	if !strings.Contains(status.Convert(err).Message(), ErrCreateControllerChanged.Error()) {
		t.Fatalf("create after the instance changed: %v, want ErrCreateControllerChanged", err)
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("code %s, want FailedPrecondition", status.Code(err))
	}
	for _, want := range []string{"node " + n.GetId(), "task plugin of alloc a9", `volume "db"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got := p.CreateVolume.Count(); got != 1 {
		t.Errorf("%d CreateVolume calls, want 1: the retry must not go to another instance", got)
	}
}

// When an update turns a plugin to not requiring the controller publish,
// the publishes it skips are logged for the operator: the plugin, and each
// attachment removed with its volume and node.
func TestSkippedPublishesAreLogged(t *testing.T) {
	p := csifake.New()
	release := p.ControllerPublishVolume.Block()
	defer release()
	tc, s, _, n, logs := volumeCluster(t, p)
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: fsVolume("v1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.raftApply(ctx10s(t), fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{
		Id: "c1", VolumeId: "v1", NodeId: n.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_READ, Operator: true,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
	}}); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.fsm.State().Attachment(nil, "v1", n.GetId()); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING {
		t.Fatalf("attachment %v, want attaching", a)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.csi.k8s.io", AllocId: "a9",
			Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true}}},
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, Provider: "hostpath.csi.k8s.io", AllocId: "a9", Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK}},
	})
	if a, _ := s.fsm.State().Attachment(nil, "v1", n.GetId()); a != nil {
		t.Fatalf("attachment %v after the switch, want none", a)
	}
	got := logs.String()
	for _, want := range []string{"csi plugin no longer requires a controller publish", "plugin_id=hp", "controller publish skipped", "volume=v1", "node=" + n.GetId()} {
		if !strings.Contains(got, want) {
			t.Errorf("log does not say %q:\n%s", want, got)
		}
	}
}
