package nodes

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/pb"
)

// markDownTimeout bounds one down-marking proposal of a heartbeat timer.
const markDownTimeout = 30 * time.Second

// StatusHooks hold a node status change at a point where a test would
// otherwise depend on timing. Production servers pass none.
type StatusHooks struct {
	// BeforeNodeStatus runs in Set between reading the node's evaluations
	// and proposing its status change.
	BeforeNodeStatus func(nodeID string)
}

// Statuses proposes node status changes with the evaluations they need.
// It is what the heartbeat timers mark nodes down and ready with
// (HeartbeatNodes), over the server's state and proposals.
type Statuses struct {
	core   Core
	clock  clock.Clock
	logger hclog.Logger
	hooks  StatusHooks
}

var _ HeartbeatNodes = (*Statuses)(nil)

// NewStatuses returns node status changes over core, stamped with clk.
func NewStatuses(core Core, clk clock.Clock, logger hclog.Logger, hooks StatusHooks) *Statuses {
	return &Statuses{core: core, clock: clk, logger: logger, hooks: hooks}
}

// Nodes lists the nodes in local state.
func (st *Statuses) Nodes() ([]*pb.Node, error) { return st.core.State().Nodes(nil) }

// NodeByID reads one node from local state (nil if it is not there).
func (st *Statuses) NodeByID(id string) (*pb.Node, error) { return st.core.State().NodeByID(nil, id) }

// MarkDown proposes the node's ready → down change, conditional on the
// node still being at modifyIndex.
func (st *Statuses) MarkDown(ctx context.Context, id, reason string, modifyIndex uint64) error {
	ctx, cancel := context.WithTimeout(ctx, markDownTimeout)
	defer cancel()
	_, err := st.Set(ctx, id, pb.NodeStatus_NODE_STATUS_DOWN, reason, modifyIndex)
	return err
}

// MarkReady proposes the node's down → ready change.
func (st *Statuses) MarkReady(ctx context.Context, id string) error {
	_, err := st.Set(ctx, id, pb.NodeStatus_NODE_STATUS_READY, "heartbeat resumed", 0)
	return err
}

// Set proposes a node status change stamped with the server clock,
// conditional on the node's modify index when ifModifyIndex is not 0.
// The evaluations of the jobs with allocs on the node travel with it (a
// node down: its allocs are lost and replaced; back up: it learns what to
// stop), and of every system job when the node comes back.
func (st *Statuses) Set(ctx context.Context, nodeID string, status pb.NodeStatus, desc string, ifModifyIndex uint64) (uint64, error) {
	nodeEvals, err := evals.ForNode(st.core.State().Snapshot(), st.clock.Now(), nodeID, pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE,
		status == pb.NodeStatus_NODE_STATUS_READY)
	if err != nil {
		return 0, err
	}
	if st.hooks.BeforeNodeStatus != nil {
		st.hooks.BeforeNodeStatus(nodeID)
	}
	idx, err := st.core.Apply(ctx, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
		NodeId:        nodeID,
		Status:        status,
		Description:   desc,
		UpdatedAt:     st.clock.Now().UnixNano(),
		IfModifyIndex: ifModifyIndex,
		Evals:         nodeEvals,
	})
	if err != nil {
		return idx, err
	}
	// A plan may have placed on the node between the read above and the
	// apply (the node was still ready): its job needs an evaluation too, or
	// an alloc of a down node would never be marked lost.
	if err := st.evalNewcomers(ctx, nodeID, nodeEvals); err != nil {
		st.logger.Warn("evaluating jobs placed on a node while its status changed", "node", nodeID, "error", err)
	}
	return idx, nil
}

// evalNewcomers proposes an evaluation for each job with a live alloc on
// the node that none of have covers.
func (st *Statuses) evalNewcomers(ctx context.Context, nodeID string, have []*pb.Evaluation) error {
	covered := map[string]bool{}
	for _, e := range have {
		covered[e.GetJobId()] = true
	}
	now, err := evals.ForNode(st.core.State().Snapshot(), st.clock.Now(), nodeID, pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE, false)
	if err != nil {
		return err
	}
	var missing []*pb.Evaluation
	for _, e := range now {
		if !covered[e.GetJobId()] {
			missing = append(missing, e)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = st.core.Apply(ctx, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: missing})
	return err
}
