package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

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
	if !strings.Contains(status.Convert(err).Message(), endpoints.ErrCreateControllerChanged.Error()) {
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
