package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

func (a *Agent) nodeList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.NodeListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewNodesClient(c).List(ctx, &pb.NodeListRequest{Query: q})
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetNodes())
}

func (a *Agent) nodeGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	var resp *pb.NodeGetResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewNodesClient(c).Get(ctx, &pb.NodeGetRequest{NodeId: id, Query: q})
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetNode())
}
