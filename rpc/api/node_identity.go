package api

import (
	"context"
	"net/http"

	"berth.dev/berth/rpc/pb"
)

// Readmit clears a node's stored secret, so its next registration is
// issued a new one: for a node whose state was lost, whose registrations
// the servers refuse.
func (n *NodeOps) Readmit(ctx context.Context, nodeID string) (*pb.NodeOpResponse, error) {
	out := &pb.NodeOpResponse{}
	return out, n.c.write(ctx, http.MethodPut, nodePath(nodeID, "/readmit"), nil, &pb.NodeReadmitRequest{}, out)
}
