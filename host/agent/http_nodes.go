package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// nodeList is GET /v1/nodes: one page of nodes in ID order, optionally
// only those with ?status=ready|down; ?stub=true answers list stubs
// (http_nodes_stub.go).
func (a *Agent) nodeList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.NodeListRequest{Query: q}
	st, err := queryEnum(r, "status", pb.NodeStatus(0).Descriptor())
	if err != nil {
		return err
	}
	req.Status = pb.NodeStatus(st)
	stub, err := queryBool(r, "stub")
	if err != nil {
		return err
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
	if stub {
		return writeProtoList(w, nodeStubs(resp.GetNodes()))
	}
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

// nodeAllocations is GET /v1/node/{id}/allocations: one page of the node's
// allocs in ID order; a blocking query.
func (a *Agent) nodeAllocations(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.NodeAllocationsRequest{NodeId: r.PathValue("id"), Query: q}
	var resp *pb.AllocListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewNodeOpsClient(c).Allocations(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetAllocs())
}

// nodeDrain is PUT /v1/node/{id}/drain with a NodeDrainRequest body:
// {"drain": {"deadline_ms": 3600000, "ignore_system_jobs": false},
// "mark_eligible": false}; "drain": null ends a drain.
func (a *Agent) nodeDrain(w http.ResponseWriter, r *http.Request) error {
	req := &pb.NodeDrainRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := samePathID("node_id", req.GetNodeId(), id); err != nil {
		return err
	}
	req.NodeId = id
	if d := req.GetDrain(); d.GetStartedAt() != 0 || d.GetForceDeadlineAt() != 0 {
		return badRequest("request body: drain.started_at and drain.force_deadline_at are set by the servers; give drain.deadline_ms")
	}
	return a.nodeOp(w, r, func(ctx context.Context, c pb.NodeOpsClient) (*pb.NodeOpResponse, error) {
		return c.UpdateDrain(ctx, req)
	})
}

// nodeEligibility is PUT /v1/node/{id}/eligibility with a body
// {"eligibility": "eligible"|"ineligible"}.
func (a *Agent) nodeEligibility(w http.ResponseWriter, r *http.Request) error {
	req := &pb.NodeEligibilityRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := samePathID("node_id", req.GetNodeId(), id); err != nil {
		return err
	}
	req.NodeId = id
	if req.GetEligibility() == pb.NodeEligibility_NODE_ELIGIBILITY_UNSPECIFIED {
		return badRequest(`request body: eligibility is required: "eligible" or "ineligible"`)
	}
	return a.nodeOp(w, r, func(ctx context.Context, c pb.NodeOpsClient) (*pb.NodeOpResponse, error) {
		return c.UpdateEligibility(ctx, req)
	})
}

func (a *Agent) nodeOp(w http.ResponseWriter, r *http.Request, call func(context.Context, pb.NodeOpsClient) (*pb.NodeOpResponse, error)) error {
	var resp *pb.NodeOpResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = call(ctx, pb.NewNodeOpsClient(c))
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// nodeFence is PUT /v1/node/{id}/fence: the operator says the node is off,
// so its volume claims are released at once. An empty body fences;
// {"fenced": false} lifts the fence.
func (a *Agent) nodeFence(w http.ResponseWriter, r *http.Request) error {
	req := &pb.NodeFenceRequest{}
	if err := decodeBody(w, r, req, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := samePathID("node_id", req.GetNodeId(), id); err != nil {
		return err
	}
	req.NodeId = id
	return a.nodeOp(w, r, func(ctx context.Context, c pb.NodeOpsClient) (*pb.NodeOpResponse, error) {
		return c.UpdateFence(ctx, req)
	})
}
