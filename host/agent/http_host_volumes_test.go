package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

type fakeHostVolumes struct {
	pb.UnimplementedHostVolumesServer
	s *fakeState
}

func (f *fakeHostVolumes) Create(_ context.Context, req *pb.HostVolumeCreateRequest) (*pb.HostVolumeCreateResponse, error) {
	if err := f.s.record("HostVolumes.Create", req); err != nil {
		return nil, err
	}
	v := req.GetVolume()
	v.Id, v.NodeId, v.State = "hv1", "n1", pb.HostVolumeState_HOST_VOLUME_STATE_READY
	return &pb.HostVolumeCreateResponse{Volume: v, Index: f.s.update(func() {})}, nil
}

func (f *fakeHostVolumes) List(_ context.Context, req *pb.HostVolumeListRequest) (*pb.HostVolumeListResponse, error) {
	if err := f.s.record("HostVolumes.List", req); err != nil {
		return nil, err
	}
	return &pb.HostVolumeListResponse{Volumes: []*pb.HostVolume{{Id: "hv1", Name: "data", NodeId: req.GetNodeId()}}, Meta: &pb.QueryMeta{Index: 7}}, nil
}

func (f *fakeHostVolumes) Get(_ context.Context, req *pb.HostVolumeGetRequest) (*pb.HostVolumeGetResponse, error) {
	if req.GetId() != "hv1" {
		return nil, fmt.Errorf("host volume %s: %w", req.GetId(), fsm.ErrVolumeNotFound)
	}
	return &pb.HostVolumeGetResponse{Volume: &pb.HostVolume{Id: "hv1", Name: "data"}, Meta: &pb.QueryMeta{Index: 7}}, nil
}

func (f *fakeHostVolumes) Delete(_ context.Context, req *pb.HostVolumeDeleteRequest) (*pb.HostVolumeDeleteResponse, error) {
	if err := f.s.record("HostVolumes.Delete", req); err != nil {
		return nil, err
	}
	if req.GetId() == "busy" {
		return nil, fmt.Errorf("host volume %q (busy) on node n1: %w: claim c1 of alloc a1", "data", fsm.ErrVolumeInUse)
	}
	return &pb.HostVolumeDeleteResponse{Index: f.s.update(func() {})}, nil
}

// The host volume routes reach HostVolumes: create with its body and the
// write's index, list with node_id, get (404 for none), delete (409 while
// claimed); the Go client sends the same requests.
func TestHostVolumeEndpoints(t *testing.T) {
	f := newFakeServers(t)
	r := call(t, f.url, "PUT", "/v1/volumes/host", `{"volume": {"name": "data", "plugin_id": "mkdir"}}`)
	resp := &pb.HostVolumeCreateResponse{}
	r.wantOK(t, resp)
	if resp.GetVolume().GetId() != "hv1" || r.header.Get("X-Berth-Index") == "" {
		t.Fatalf("create answered %s (index %q)", r.body, r.header.Get("X-Berth-Index"))
	}
	if q := f.state.requests("HostVolumes.Create")[0].(*pb.HostVolumeCreateRequest); q.GetVolume().GetName() != "data" {
		t.Fatalf("create request %v", q)
	}
	if r := call(t, f.url, "PUT", "/v1/volumes/host", `{}`); r.status != http.StatusBadRequest {
		t.Fatalf("create without a volume: %d %s", r.status, r.body)
	}
	r = call(t, f.url, "GET", "/v1/volumes/host?node_id=n2", "")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"node_id": "n2"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := call(t, f.url, "GET", "/v1/volume/host/nope", ""); r.status != http.StatusNotFound {
		t.Fatalf("get of none: %d %s", r.status, r.body)
	}
	if r := call(t, f.url, "DELETE", "/v1/volume/host/busy", ""); r.status != http.StatusConflict || !strings.Contains(string(r.body), "alloc a1") {
		t.Fatalf("delete of a claimed volume: %d %s", r.status, r.body)
	}

	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, _, err := c.HostVolumes().Info(ctx, "hv1", nil); err != nil || v.GetName() != "data" {
		t.Fatalf("api Info: %v, %v", v, err)
	}
	if vs, _, err := c.HostVolumes().List(ctx, nil); err != nil || len(vs) != 1 {
		t.Fatalf("api List: %v, %v", vs, err)
	}
	if _, err := c.HostVolumes().Delete(ctx, "hv1"); err != nil {
		t.Fatalf("api Delete: %v", err)
	}
	if got := f.state.requests("HostVolumes.Delete"); len(got) != 2 || got[1].(*pb.HostVolumeDeleteRequest).GetId() != "hv1" {
		t.Fatalf("delete requests %v", got)
	}
}
