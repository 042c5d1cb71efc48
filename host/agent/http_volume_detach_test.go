package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func (f *fakeVolumes) Detach(_ context.Context, req *pb.VolumeDetachRequest) (*pb.VolumeDetachResponse, error) {
	if err := f.s.record("Volumes.Detach", req); err != nil {
		return nil, err
	}
	if req.GetVolumeId() == "busy" {
		return nil, fmt.Errorf("detaching volume %q from node %s: %w: alloc a1 (running, claim in-use); stop it first", req.GetVolumeId(), req.GetNodeId(), endpoints.ErrVolumeInUseOnNode)
	}
	idx := f.s.update(func() {})
	return &pb.VolumeDetachResponse{Node: &pb.CSINodeDetachResponse{PluginId: "ebs", AllocIds: []string{"a1"}, Unstaged: true},
		Meta: &pb.WriteMeta{Index: idx}}, nil
}

// DELETE /v1/volume/csi/{id}/detach?node= reaches Volumes.Detach with the
// volume and the node, answers what the node did with the write's index,
// maps a refusal to 409 with its message, and needs the node; the Go
// client sends the same request.
func TestVolumeDetachEndpoint(t *testing.T) {
	f := newFakeServers(t)
	r := call(t, f.url, "DELETE", "/v1/volume/csi/data/detach?node=n1", "")
	resp := &pb.VolumeDetachResponse{}
	r.wantOK(t, resp)
	if resp.GetNode().GetPluginId() != "ebs" || len(resp.GetNode().GetAllocIds()) != 1 || r.header.Get("X-Berth-Index") == "" {
		t.Fatalf("detach answered %s (index %q)", r.body, r.header.Get("X-Berth-Index"))
	}
	if q := f.state.requests("Volumes.Detach")[0].(*pb.VolumeDetachRequest); q.GetVolumeId() != "data" || q.GetNodeId() != "n1" {
		t.Fatalf("detach request = %v", q)
	}
	r = call(t, f.url, "DELETE", "/v1/volume/csi/busy/detach?node=n1", "")
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), "alloc a1") || !strings.Contains(string(r.body), `"failed_precondition"`) {
		t.Fatalf("refused detach: %d %s, want 409 naming the alloc", r.status, r.body)
	}
	if r := call(t, f.url, "DELETE", "/v1/volume/csi/data/detach", ""); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "node") {
		t.Fatalf("detach without node: %d %s, want 400", r.status, r.body)
	}
	if r := call(t, f.url, "PUT", "/v1/volume/csi/data/detach?node=n1", ""); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("PUT detach: %d %s, want 405", r.status, r.body)
	}

	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Volumes().Detach(context.Background(), "data", "n2")
	if err != nil || !got.GetNode().GetUnstaged() {
		t.Fatalf("api Detach: %v, %v", got, err)
	}
	if q := f.state.requests("Volumes.Detach"); q[len(q)-1].(*pb.VolumeDetachRequest).GetNodeId() != "n2" {
		t.Fatalf("api Detach sent %v", q[len(q)-1])
	}
}
