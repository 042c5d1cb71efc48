package agent

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// nodeList is GET /v1/nodes: one page of nodes in ID order, optionally
// only those with ?status=ready|down.
func (a *Agent) nodeList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.NodeListRequest{Query: q}
	if s := r.URL.Query().Get("status"); s != "" {
		ed := pb.NodeStatus(0).Descriptor()
		n, ok := apijson.EnumNumber(ed, s)
		if !ok || n == 0 {
			return badRequest("query parameter status=%q: must be one of %s", s, strings.Join(apijson.EnumWords(ed, false), ", "))
		}
		req.Status = pb.NodeStatus(n)
	}
	var resp *pb.NodeListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewNodesClient(c).List(ctx, req)
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
