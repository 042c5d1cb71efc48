package agent

import (
	"context"
	"net/http"

	"berth.dev/berth/rpc/pb"
)

// nodeReadmit is PUT /v1/node/{id}/readmit: clear the node's stored
// secret so its next registration is issued a new one (a node whose state
// DB was lost). The body is empty or {"node_id": …} naming the same node.
func (a *Agent) nodeReadmit(w http.ResponseWriter, r *http.Request) error {
	req := &pb.NodeReadmitRequest{}
	if err := decodeBody(w, r, req, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := samePathID("node_id", req.GetNodeId(), id); err != nil {
		return err
	}
	req.NodeId = id
	return a.nodeOp(w, r, func(ctx context.Context, c pb.NodeOpsClient) (*pb.NodeOpResponse, error) {
		return c.Readmit(ctx, req)
	})
}
