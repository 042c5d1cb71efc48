package agent

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

func (f *fakeNodeOps) Readmit(_ context.Context, req *pb.NodeReadmitRequest) (*pb.NodeOpResponse, error) {
	if err := f.s.record("NodeOps.Readmit", req); err != nil {
		return nil, err
	}
	return &pb.NodeOpResponse{Meta: &pb.WriteMeta{Index: f.s.update(func() {})}}, nil
}

// PUT /v1/node/{id}/readmit (the Go client's NodeOps.Readmit, and a plain
// empty body) reaches NodeOps.Readmit naming the node; a body naming
// another node is refused.
func TestNodeReadmit(t *testing.T) {
	f := newFakeServers(t)
	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NodeOps().Readmit(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	call(t, f.url, "PUT", "/v1/node/n2/readmit", "").wantOK(t, nil)
	call(t, f.url, "PUT", "/v1/node/n1/readmit", `{"node_id": "n2"}`).wantError(t, 400, "invalid_argument", `"n2" differs from "n1"`)
	got := f.state.requests("NodeOps.Readmit")
	if len(got) != 2 || !proto.Equal(got[0], &pb.NodeReadmitRequest{NodeId: "n1"}) || !proto.Equal(got[1], &pb.NodeReadmitRequest{NodeId: "n2"}) {
		t.Fatalf("readmit requests = %v", got)
	}
}
