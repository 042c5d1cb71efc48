package endpoints

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/client/hostvolumes"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// A plugin that hangs past its deadline is killed, and may have acted: a
// create keeps the volume recorded pending (not forgotten: it may exist),
// a delete keeps it deleting (not put back ready: it may be half gone).
func TestHostVolumeHangingPluginIsUncertain(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "hang")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 600 &\nwait\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := &hostvolumes.External{ID: "hang", Path: script, PluginDir: dir, VolumesDir: filepath.Join(dir, "vols")}
	hang := false
	node.answer = func(create bool, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		if !hang {
			return &pb.HostVolumeOnNodeResponse{HostPath: "/vols/" + v.GetId()}, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req := hostvolumes.Request{ID: v.GetId(), Name: v.GetName(), Path: filepath.Join(dir, "vols", v.GetId())}
		var err error
		if create {
			_, err = plugin.Create(ctx, req)
		} else {
			err = plugin.Delete(ctx, req)
		}
		return nil, errcode.Status(err) // as the client passes it on
	}
	ctx := context.Background()

	hang = true
	_, err := e.Create(ctx, newHostVolume("made-maybe"))
	if err == nil || !strings.Contains(err.Error(), "stays recorded pending") {
		t.Fatalf("a create whose plugin hung: %v", err)
	}
	vols, err := s.State().HostVolumesByNode(nil, hvNode1)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_PENDING {
		t.Fatalf("after a create whose plugin hung: %v, want it pending", vols)
	}

	hang = false
	resp, err := e.Create(ctx, newHostVolume("data"))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetId()
	hang = true
	if _, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: id}); err == nil || !strings.Contains(err.Error(), "stays marked deleting") {
		t.Fatalf("a delete whose plugin hung: %v", err)
	}
	if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_DELETING {
		t.Fatalf("after a delete whose plugin hung: %v, want deleting", v)
	}
}

// A delete whose node call failed for certain puts the volume back only
// while it is still under its own deleting mark: when a second delete
// took the volume over meanwhile (delete again), the first one's put_back
// is refused and the volume stays deleting for the second.
func TestHostVolumePutBackOnlyUnderItsOwnMark(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	ctx := context.Background()
	resp, err := e.Create(ctx, newHostVolume("data"))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetId()
	var second error
	node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
			return nil, status.Error(codes.DeadlineExceeded, "the second delete's node call: no answer")
		}
		// While the first delete's node call runs, a second delete marks
		// it again (and its node call is uncertain: it stays deleting).
		_, second = e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: id})
		return nil, status.Error(codes.Internal, "the first delete's plugin failed")
	}
	_, err = e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: id})
	if err == nil || !errors.Is(err, fsm.ErrHostVolumeMarkChanged) {
		t.Fatalf("the first delete: %v, want its put_back refused", err)
	}
	if second == nil || !strings.Contains(second.Error(), "stays marked deleting") {
		t.Fatalf("the second delete: %v", second)
	}
	if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_DELETING {
		t.Fatalf("after both: %v, want deleting", v)
	}
}

// A pending volume (a create whose answer was lost) that its node reports
// under its name and ID is recorded ready at the node's registration,
// with the path the node reports; one the node does not report, or
// reports under another ID, stays pending.
func TestHostVolumePendingPromotedAtRegistration(t *testing.T) {
	e, s, _ := hostVolumeEndpoint(t)
	ctx := context.Background()
	for _, v := range []*pb.HostVolume{
		{Id: "p1", Name: "made", NodeId: hvNode1, State: pb.HostVolumeState_HOST_VOLUME_STATE_PENDING},
		{Id: "p2", Name: "not-made", NodeId: hvNode1, State: pb.HostVolumeState_HOST_VOLUME_STATE_PENDING},
		{Id: "p3", Name: "other-id", NodeId: hvNode1, State: pb.HostVolumeState_HOST_VOLUME_STATE_PENDING},
	} {
		if _, err := s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v}); err != nil {
			t.Fatal(err)
		}
	}
	n := &pb.Node{Id: hvNode1, Name: "1", HostVolumes: map[string]*pb.HostVolumeInfo{
		"made": {Id: "p1", Path: "/vols/p1"}, "other-id": {Id: "zz", Path: "/vols/zz"},
	}}
	if err := promotePendingHostVolumes(ctx, e.s, n); err != nil {
		t.Fatal(err)
	}
	if v := storedHostVolume(t, s, "p1"); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_READY || v.GetHostPath() != "/vols/p1" {
		t.Fatalf("a pending volume its node reports: %v, want ready at /vols/p1", v)
	}
	for _, id := range []string{"p2", "p3"} {
		if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_PENDING {
			t.Fatalf("%s: %v, want pending", id, v)
		}
	}
}

// A create whose pending record cannot be written names the volume's ID
// (the one it would have had), its name and node; the node is not asked.
func TestHostVolumePendingRecordFailureNamesTheVolume(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	s.refuse = errors.New("no leader")
	_, err := e.Create(context.Background(), newHostVolume("data"))
	if err == nil || !strings.Contains(err.Error(), `recording host volume "data" (`) || !strings.Contains(err.Error(), ") on node "+hvNode1+" pending: no leader") {
		t.Fatalf("a pending record refused: %v", err)
	}
	if len(node.calls) != 0 {
		t.Fatalf("node calls %v", node.calls)
	}
}

// The registration answer lists the node's dynamic host volumes the
// servers hold, in any state, and no other node's; a forced delete's
// warning says the node stops advertising the volume when it comes back.
func TestHostVolumeIDsHeldForTheRegistration(t *testing.T) {
	e, s, _ := hostVolumeEndpoint(t)
	ctx := context.Background()
	for _, v := range []*pb.HostVolume{
		{Id: "r", Name: "a", NodeId: hvNode1, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY},
		{Id: "p", Name: "b", NodeId: hvNode1, State: pb.HostVolumeState_HOST_VOLUME_STATE_PENDING},
		{Id: "o", Name: "a", NodeId: hvNode3, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY},
	} {
		if _, err := s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v}); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := heldHostVolumeIDs(e.s, hvNode1)
	if err != nil || len(ids) != 2 || !slices.Contains(ids, "r") || !slices.Contains(ids, "p") {
		t.Fatalf("held for node 1: %v (%v)", ids, err)
	}
	resp, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: "o", Force: true})
	if err != nil || !strings.Contains(resp.GetWarning(), "stops advertising the volume (and keeps its data) when it registers") {
		t.Fatalf("forced delete: %v, %v", resp, err)
	}
}
