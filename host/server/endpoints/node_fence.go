package endpoints

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/rpc/pb"
)

// UpdateFence records an operator's word that a node is off (NodeFence,
// command 23), or lifts it. A fence is what lets volumes go at once from a
// node that will never report their unpublish: the state machine moves
// the node's releasing claims to node-detached in the same apply, and the
// leader's reaper and attach reconciler unpublish through the controller.
//
// Fencing a node the servers see as ready is refused: it heartbeats, so it
// is not off, and freeing its single-writer volumes for another node while
// it still writes to them is the corruption a fence exists to prevent
// being done by hand. Stop it, wait until it is down, then fence it.
//
// Lifting the fence of a ready node makes it schedulable again, so its
// jobs (system jobs too) are evaluated as when a node becomes eligible.
func (e *nodeOpsEndpoint) UpdateFence(ctx context.Context, req *pb.NodeFenceRequest) (*pb.NodeOpResponse, error) {
	s := e.s
	fenced := req.Fenced == nil || req.GetFenced()
	snap, n, err := e.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	if fenced && n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY && !n.GetFenced() {
		return nil, status.Errorf(codes.FailedPrecondition,
			"node %s (%s) is ready: it still heartbeats, so it is not off; stop it and fence it once the servers see it down", n.GetId(), n.GetName())
	}
	// The volume tables and their commands (17 to 23) came in one version,
	// the plugin table's.
	if err := s.RequireServersAt(csiPluginsSince, CSIPluginsSinceVersion, "node fences"); err != nil {
		return nil, err
	}
	idx, err := s.Apply(ctx, fsm.NodeFence, &pb.NodeFenceCommand{
		NodeId: n.GetId(), Fenced: fenced, UpdatedAt: s.Clock.Now().UnixNano(),
	})
	if err != nil {
		what := "fencing"
		if !fenced {
			what = "lifting the fence of"
		}
		return nil, fmt.Errorf("%s node %s: %w", what, n.GetId(), err)
	}
	resp := &pb.NodeOpResponse{Meta: &pb.WriteMeta{Index: idx}}
	if fenced || !n.GetFenced() || n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY {
		return resp, nil
	}
	evals, err := evals.ForNode(snap, s.Clock.Now(), n.GetId(), pb.EvalTrigger_EVAL_TRIGGER_NODE_ELIGIBILITY, true)
	if err != nil {
		return nil, err
	}
	if len(evals) == 0 {
		return resp, nil
	}
	if idx, err = s.Apply(ctx, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: evals}); err != nil {
		return nil, fmt.Errorf("node %s is unfenced; evaluating its %d jobs: %w", n.GetId(), len(evals), err)
	}
	resp.EvalIds, resp.Meta = evalIDs(evals), &pb.WriteMeta{Index: idx}
	return resp, nil
}
