package api

import (
	"context"
	"net/http"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// NodeOps changes nodes' scheduling and lists their allocs (the node reads
// themselves are Client.Nodes and Client.Node).
type NodeOps struct{ c *Client }

// NodeOps returns the node operation endpoints.
func (c *Client) NodeOps() *NodeOps { return &NodeOps{c} }

// Drain starts a drain of the node with the given strategy (its
// deadline_ms and ignore_system_jobs; the servers stamp the times), or
// ends one when drain is nil; markEligible makes the node eligible again
// when it ends.
func (n *NodeOps) Drain(ctx context.Context, nodeID string, drain *pb.DrainStrategy, markEligible bool) (*pb.NodeOpResponse, error) {
	out := &pb.NodeOpResponse{}
	req := &pb.NodeDrainRequest{Drain: drain, MarkEligible: markEligible}
	return out, n.c.write(ctx, http.MethodPut, nodePath(nodeID, "/drain"), nil, req, out)
}

// Eligibility makes a node eligible or ineligible for new allocs.
func (n *NodeOps) Eligibility(ctx context.Context, nodeID string, eligible bool) (*pb.NodeOpResponse, error) {
	req := &pb.NodeEligibilityRequest{Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE}
	if eligible {
		req.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
	}
	out := &pb.NodeOpResponse{}
	return out, n.c.write(ctx, http.MethodPut, nodePath(nodeID, "/eligibility"), nil, req, out)
}

// Fence says a node is off (fenced true), which releases its volume
// claims at once, or lifts that (false).
func (n *NodeOps) Fence(ctx context.Context, nodeID string, fenced bool) (*pb.NodeOpResponse, error) {
	out := &pb.NodeOpResponse{}
	return out, n.c.write(ctx, http.MethodPut, nodePath(nodeID, "/fence"), nil, &pb.NodeFenceRequest{Fenced: &fenced}, out)
}

// Allocations returns one page of a node's allocs in ID order.
func (n *NodeOps) Allocations(ctx context.Context, nodeID string, q *QueryOptions) ([]*pb.Allocation, *QueryMeta, error) {
	return getList(ctx, n.c, nodePath(nodeID, "/allocations"), q, newAlloc)
}

func nodePath(id, rest string) string { return "/v1/node/" + url.PathEscape(id) + rest }

// System runs cluster maintenance.
type System struct{ c *Client }

// System returns the maintenance endpoints.
func (c *Client) System() *System { return &System{c} }

// GC collects old evaluations, terminal allocs and purged jobs now and
// says how many of each went.
func (s *System) GC(ctx context.Context) (*pb.GCResponse, error) {
	out := &pb.GCResponse{}
	return out, s.c.write(ctx, http.MethodPut, "/v1/system/gc", nil, nil, out)
}
