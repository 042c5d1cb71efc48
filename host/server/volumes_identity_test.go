package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/pb"
)

// wantRefusal fails unless err has the code and names every part.
func wantRefusal(t *testing.T, what string, err error, code codes.Code, parts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not name %q", what, err, p)
		}
	}
}

// One plugin's volume is registered under one volume ID: a register, or a
// create whose plugin answers with a volume registered already, under
// another ID is refused AlreadyExists (409), naming both IDs, the plugin
// and the external ID, and nothing is registered.
func TestVolumeRegisterRefusesASecondIDForOneExternalVolume(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	registerFS(t, p, vols, "a")

	twin := fsVolume("b")
	twin.ExternalId = "ext-a"
	p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeCapabilities: endpoints.CSICapabilities(twin)}}, nil)
	_, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: twin})
	wantRefusal(t, "register of a's external volume as b", err, codes.AlreadyExists, `volume "b"`, `volume "a"`, `plugin "hp"`, `"ext-a"`)

	c := fsVolume("c")
	c.ExternalId = ""
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-a"}}, nil)
	_, err = vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: c})
	wantRefusal(t, "create answered with a's external volume", err, codes.AlreadyExists, `volume "c"`, `volume "a"`, `plugin "hp"`, `"ext-a"`, "CreateVolume")
	for _, id := range []string{"b", "c"} {
		if v, _ := s.fsm.State().VolumeByID(nil, id); v != nil {
			t.Errorf("volume %s is registered: %v", id, v)
		}
	}
	if p.DeleteVolume.Count() != 0 {
		t.Error("the refused create deleted a's volume at the plugin")
	}
}

// A create of an ID registered already creates nothing: the same spec is
// an explicit no-op (unchanged), another spec is refused AlreadyExists
// (409) naming the volume and each field that differs.
func TestVolumeCreateOfAnExistingID(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	spec := func() *pb.Volume {
		v := fsVolume("db")
		v.ExternalId = ""
		v.RequestedCapacityMinBytes = 1 << 30
		v.Parameters = map[string]string{"tier": "fast"}
		v.Secrets = map[string]string{"token": "s3cr3t"}
		return v
	}
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db", CapacityBytes: 1 << 30,
		VolumeContext: map[string]string{"path": "/x"}}}, nil)
	first, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec()})
	if err != nil || first.GetUnchanged() {
		t.Fatalf("create: %v, %v", first, err)
	}
	stored, _ := s.fsm.State().VolumeByID(nil, "db")

	again, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec()})
	if err != nil || !again.GetUnchanged() || again.GetVolume().GetExternalId() != "ext-db" || len(again.GetWarnings()) != 0 ||
		again.GetMeta().GetIndex() != stored.GetModifyIndex() {
		t.Fatalf("the same create again: %v, %v; want an unchanged answer at the volume's index %d", again, err, stored.GetModifyIndex())
	}

	other := spec()
	other.Capabilities[0].AccessMode = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	_, err = vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: other})
	wantRefusal(t, "create with other capabilities", err, codes.AlreadyExists, `volume "db"`, `"ext-db"`,
		"capabilities: registered [single-node-writer/file-system], asked [multi-node-multi-writer/file-system]", "nothing was created")

	other = spec()
	other.RequestedCapacityMinBytes = 2 << 30
	other.Parameters["tier"] = "slow"
	other.Context = map[string]string{"path": "/y"}
	_, err = vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: other})
	wantRefusal(t, "create with another capacity, parameters and context", err, codes.AlreadyExists, `volume "db"`,
		"capacity_min: registered 1073741824, asked 2147483648", "parameters: registered map[tier:fast], asked map[tier:slow]",
		`context["path"]: registered "/x", asked "/y"`)

	if p.CreateVolume.Count() != 1 {
		t.Errorf("%d CreateVolume calls, want the first create's only", p.CreateVolume.Count())
	}
	if now, _ := s.fsm.State().VolumeByID(nil, "db"); !proto.Equal(now, stored) {
		t.Errorf("the volume changed:\n%v\nwas\n%v", now, stored)
	}
}

// Two creates of one ID race through their plugin calls: the one that
// registers second does not overwrite the first. Here the first create is
// held in CreateVolume while the ID is registered with other capabilities;
// released, it is refused naming what differs, and the registered volume
// stays as it is. The same spec would be answered unchanged.
func TestVolumeCreateNeverOverwritesACreateThatWonTheRace(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	spec := func() *pb.Volume {
		v := fsVolume("db")
		v.ExternalId = ""
		return v
	}
	type answer struct {
		resp *pb.VolumeRegisterResponse
		err  error
	}
	race := func(winner *pb.Volume) answer {
		t.Helper()
		p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db"}}, nil)
		release := p.CreateVolume.Block()
		defer release()
		calls := p.CreateVolume.Count()
		done := make(chan answer, 1)
		go func() {
			resp, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec()})
			done <- answer{resp, err}
		}()
		for end := time.Now().Add(10 * time.Second); p.CreateVolume.Count() == calls; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the plugin never got CreateVolume")
			}
		}
		if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: winner}); err != nil {
			t.Fatal(err)
		}
		release()
		return <-done
	}

	winner := spec()
	winner.ExternalId = "ext-db"
	winner.Capabilities[0].AccessMode = pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	wantRefusal(t, "the create that lost the race", race(winner).err, codes.AlreadyExists, `volume "db"`,
		"capabilities: registered [multi-node-multi-writer/file-system], asked [single-node-writer/file-system]")
	if v, _ := s.fsm.State().VolumeByID(nil, "db"); v.GetCapabilities()[0].GetAccessMode() != pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER {
		t.Fatalf("the winner was overwritten: %v", v)
	}

	if _, err := s.raftApply(ctx10s(t), fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "db"}); err != nil {
		t.Fatal(err)
	}
	same := spec()
	same.Name, same.ExternalId = "db", "ext-db"
	if got := race(same); got.err != nil || !got.resp.GetUnchanged() {
		t.Fatalf("a create that lost the race to the same spec: %v, %v; want it answered unchanged", got.resp, got.err)
	}
}

// A create compares messages by value: an empty mount_options or
// topology_request is the same as none, either way round, so the same
// create again is answered unchanged.
func TestVolumeCreateComparesEmptyAndAbsentAlike(t *testing.T) {
	p := csifake.New()
	_, _, vols, _, _ := volumeCluster(t, p)
	for i, empty := range []bool{true, false} {
		id := fmt.Sprintf("v%d", i)
		spec := func(withEmpty bool) *pb.Volume {
			v := fsVolume(id)
			v.ExternalId, v.MountOptions, v.TopologyRequest = "", nil, nil
			if withEmpty {
				v.MountOptions, v.TopologyRequest = &pb.MountOptions{}, &pb.TopologyRequest{}
			}
			return v
		}
		p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-" + id}}, nil)
		if _, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec(empty)}); err != nil {
			t.Fatal(err)
		}
		again, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec(!empty)})
		if err != nil || !again.GetUnchanged() {
			t.Errorf("created with empty messages %v, again with %v: %v, %v; want unchanged", empty, !empty, again, err)
		}
	}
}

// A create of an ID its plugin is deleting is refused, ErrVolumeDeleting
// (FailedPrecondition), not answered unchanged: the volume is about to go.
func TestVolumeCreateOfAVolumeBeingDeletedIsRefused(t *testing.T) {
	p := csifake.New()
	_, s, vols, _, _ := volumeCluster(t, p)
	spec := func() *pb.Volume {
		v := fsVolume("db")
		v.ExternalId = ""
		return v
	}
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db"}}, nil)
	if _, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "db", Deleting: true}); err != nil {
		t.Fatal(err)
	}
	_, err := vols.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec()})
	wantRefusal(t, "create of a volume being deleted", err, codes.FailedPrecondition, `volume "db"`, "being deleted")
	if p.CreateVolume.Count() != 1 {
		t.Errorf("%d CreateVolume calls, want the first create's only", p.CreateVolume.Count())
	}
}

// A create whose register loses to a volume registered under the ID
// during the plugin's call, that volume deregistered again before it is
// read, registers the plugin's new volume (the ID is free again) rather
// than answer that a volume is registered when none is, leaving the new
// volume unregistered.
func TestVolumeCreateRegistersWhenTheRaceWinnerIsGone(t *testing.T) {
	p := csifake.New()
	_, s, _, _, _ := volumeCluster(t, p)
	raced := 0
	e := endpoints.New(s.endpointDeps(), endpoints.Hooks{LostRace: func(id string) {
		raced++
		if _, err := s.raftApply(ctx10s(t), fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: id}); err != nil {
			t.Error(err)
		}
	}}).Volumes
	spec := fsVolume("db")
	spec.ExternalId = ""
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-db"}}, nil)
	release := p.CreateVolume.Block()
	done := make(chan error, 1)
	var resp *pb.VolumeRegisterResponse
	go func() {
		var err error
		resp, err = e.Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: spec})
		done <- err
	}()
	for end := time.Now().Add(10 * time.Second); p.CreateVolume.Count() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the plugin never got CreateVolume")
		}
	}
	winner := fsVolume("db")
	winner.ExternalId = "ext-other"
	if _, err := s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: winner}); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("create after the winner was deregistered: %v", err)
	}
	if v, _ := s.fsm.State().VolumeByID(nil, "db"); v.GetExternalId() != "ext-db" || resp.GetUnchanged() || raced != 1 {
		t.Fatalf("volume db: %v (answer %v, races %d); want the plugin's new volume ext-db registered after one lost race", v, resp, raced)
	}
}

// While a server records a version older than volumeIdentitySince, a
// register is proposed without unique_external (and a create without
// if_absent), so it applies as an older server applies it: a second ID for
// one plugin's volume is registered, not refused by some servers and
// stored by others. Once every server is at the version, it is refused.
func TestVolumeRegisterRefusesASecondIDOnlyWhenEveryServerKnowsTheRule(t *testing.T) {
	for _, tc := range []struct {
		version string
		refused bool
	}{{endpoints.VolumesSinceVersion, false}, {endpoints.VolumeIdentitySinceVersion, true}} {
		p := csifake.New()
		_, s, vols, _, _ := volumeClusterAt(t, p, tc.version)
		registerFS(t, p, vols, "a")
		twin := fsVolume("b")
		twin.ExternalId = "ext-a"
		p.ValidateVolumeCapabilities.Next(&csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{
			VolumeCapabilities: endpoints.CSICapabilities(twin)}}, nil)
		_, err := vols.Register(ctx10s(t), &pb.VolumeRegisterRequest{Volume: twin})
		stored, _ := s.fsm.State().VolumeByID(nil, "b")
		switch {
		case tc.refused && (status.Code(err) != codes.AlreadyExists || stored != nil):
			t.Errorf("servers at %s: register of a's volume as b: %v (stored %v); want AlreadyExists, nothing stored", tc.version, err, stored)
		case !tc.refused && (err != nil || stored.GetExternalId() != "ext-a"):
			t.Errorf("servers at %s: register of a's volume as b: %v (stored %v); want it registered, as an older server does", tc.version, err, stored)
		}
	}
}
