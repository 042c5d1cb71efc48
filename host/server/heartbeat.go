package server

import (
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/clock"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// heartbeatNodes is what heartbeat timers need of the server: the nodes in
// local state, and a way to mark one down.
type heartbeatNodes interface {
	Nodes() ([]*pb.Node, error)
	NodeByID(id string) (*pb.Node, error)
	// MarkDown proposes the node's ready → down change, conditional on the
	// node still being at modifyIndex (fsm.ErrNodeChanged otherwise).
	MarkDown(ctx context.Context, id, reason string, modifyIndex uint64) error
	// MarkReady proposes the node's down → ready change.
	MarkReady(ctx context.Context, id string) error
}

// heartbeater keeps, on the leader only, one timer per ready node. Heartbeats
// reset timers in memory; raft sees only status changes: a timer firing marks
// its node down, and a heartbeat from a down node marks it ready.
//
// Its state changes only under mu, each change whole: the leader loop
// starts and stops it, a snapshot restore re-arms it (a no-op unless it
// runs; its down-markings in flight cancelled), and Shutdown closes it, so no interleaving of those can leave
// timers running on a server that does not lead.
type heartbeater struct {
	nodes  heartbeatNodes
	clock  clock.Clock
	ttl    time.Duration
	grace  time.Duration
	logger hclog.Logger

	mu     sync.Mutex
	active bool
	closed bool
	// gen numbers every arming and only grows, across leaderships too, so
	// a callback of a timer armed earlier (stopped too late, or from a
	// previous leadership) never passes for the current one.
	gen    uint64
	timers map[string]*nodeTimer
	// expiring holds, per node, a channel closed when the down-marking in
	// flight for it ends. A heartbeat that arrives meanwhile waits for it
	// and then answers the node's real status, instead of re-arming a timer
	// just before the node goes down.
	expiring map[string]chan struct{}
	// ctx ends when the leadership that armed the timers does, abandoning
	// a down-marking still in flight.
	ctx    context.Context
	cancel context.CancelFunc
}

type nodeTimer struct {
	timer clock.Timer
	gen   uint64
}

func newHeartbeater(nodes heartbeatNodes, clk clock.Clock, ttl, grace time.Duration, logger hclog.Logger) *heartbeater {
	return &heartbeater{
		nodes: nodes, clock: clk, ttl: ttl, grace: grace, logger: logger,
		timers: make(map[string]*nodeTimer), expiring: make(map[string]chan struct{}),
	}
}

// start arms a timer of TTL plus grace for every ready node, so a new
// leader does not mark down nodes that were heartbeating to the old one.
// The leader loop calls it once its barrier passed.
func (h *heartbeater) start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.active {
		return
	}
	h.active = true
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.armAllLocked()
}

// rearm restarts every timer from the nodes in state now, after a snapshot
// restore replaced them. The down-markings in flight were decided on the
// replaced state: their context is cancelled, as stop's are, and rearm
// returns once they ended, with the timers armed from the restored nodes.
// It does nothing unless the timers run: a leader whose barrier has not
// passed yet arms them from the restored state when it starts, and a
// server that no longer leads must not arm any.
func (h *heartbeater) rearm() {
	h.mu.Lock()
	if !h.active {
		h.mu.Unlock()
		return
	}
	h.cancel()
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.stopTimersLocked()
	inFlight := h.inFlightLocked()
	h.mu.Unlock()
	waitAll(inFlight)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active { // not stopped meanwhile
		h.armAllLocked()
	}
}

// stop stops every timer; the leader loop calls it when leadership ends.
// It returns once no down-marking of this leadership is in flight (their
// context is cancelled, so they end at once): a proposal it already handed
// to raft is then in the log before the next leadership's barrier, which
// applies it before that leadership arms its timers.
func (h *heartbeater) stop() {
	h.mu.Lock()
	inFlight := h.stopLocked()
	h.mu.Unlock()
	waitAll(inFlight)
}

// close stops the timers for good (the server is shutting down). Unlike
// stop it does not wait for down-markings in flight: raft shuts down next,
// which ends them, and no later leadership will follow.
func (h *heartbeater) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.stopLocked()
}

func waitAll(chs []chan struct{}) {
	for _, ch := range chs {
		<-ch
	}
}

// reset (re)arms the node's timer; it does nothing unless the timers run.
func (h *heartbeater) reset(nodeID string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active {
		h.armLocked(nodeID, d)
	}
}

// heartbeat handles a heartbeat from a known node: it re-arms the node's
// timer for d, waiting first (bounded by ctx) for a down-marking of the
// node already in flight, and then marks the node ready if it is not. A
// heartbeat that landed while a down-marking was in flight therefore never
// answers OK for a node about to go down; it brings the node back.
func (h *heartbeater) heartbeat(ctx context.Context, nodeID string, d time.Duration) error {
	for {
		h.mu.Lock()
		done, busy := h.expiring[nodeID]
		if !busy && h.active {
			// Armed before the status is read: a timer of this node that
			// fires from here on is stale, so no down-marking can start
			// between that read and this heartbeat's answer.
			h.armLocked(nodeID, d)
		}
		h.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("heartbeat of node %s waited for its down-marking in flight: %w", nodeID, ctx.Err())
		}
	}
	node, err := h.nodes.NodeByID(nodeID)
	if err != nil {
		return err
	}
	if node == nil || node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
		return nil
	}
	if err := h.nodes.MarkReady(ctx, nodeID); err != nil {
		return fmt.Errorf("marking node %s ready: %w", nodeID, err)
	}
	h.logger.Info("node ready again", "node_id", nodeID, "name", node.GetName())
	return nil
}

// tracked reports whether a timer is armed for the node.
func (h *heartbeater) tracked(nodeID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.timers[nodeID]
	return ok
}

// stopLocked stops the timers and cancels the down-markings in flight,
// returning the channels that close when those end.
func (h *heartbeater) stopLocked() []chan struct{} {
	if h.cancel != nil {
		h.cancel()
	}
	h.active = false
	h.stopTimersLocked()
	return h.inFlightLocked()
}

// inFlightLocked returns the channels that close when the down-markings
// in flight end.
func (h *heartbeater) inFlightLocked() []chan struct{} {
	inFlight := make([]chan struct{}, 0, len(h.expiring))
	for _, done := range h.expiring {
		inFlight = append(inFlight, done)
	}
	return inFlight
}

func (h *heartbeater) stopTimersLocked() {
	for id, nt := range h.timers {
		nt.timer.Stop()
		delete(h.timers, id)
	}
}

// armAllLocked arms a TTL-plus-grace timer for every ready node without one.
// Listing under mu keeps a concurrent stop from interleaving with it.
func (h *heartbeater) armAllLocked() {
	nodes, err := h.nodes.Nodes()
	if err != nil {
		h.logger.Error("listing nodes for heartbeat timers", "error", err)
		return
	}
	n := 0
	for _, node := range nodes {
		if _, ok := h.timers[node.GetId()]; !ok && node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
			h.armLocked(node.GetId(), h.ttl+h.grace)
			n++
		}
	}
	h.logger.Debug("heartbeat timers started", "nodes", n, "ttl", h.ttl+h.grace)
}

func (h *heartbeater) armLocked(nodeID string, d time.Duration) {
	if nt := h.timers[nodeID]; nt != nil {
		nt.timer.Stop()
	}
	h.gen++
	gen := h.gen
	h.timers[nodeID] = &nodeTimer{gen: gen, timer: h.clock.AfterFunc(d, func() { h.expire(nodeID, gen) })}
}

func (h *heartbeater) expire(nodeID string, gen uint64) {
	h.mu.Lock()
	nt := h.timers[nodeID]
	if !h.active || nt == nil || nt.gen != gen {
		h.mu.Unlock()
		return
	}
	delete(h.timers, nodeID)
	done := make(chan struct{})
	h.expiring[nodeID] = done
	ctx := h.ctx
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		// A registration may have re-armed the node and a second expiry
		// begun while this one's proposal was slow: leave its entry.
		if h.expiring[nodeID] == done {
			delete(h.expiring, nodeID)
		}
		h.mu.Unlock()
		close(done)
	}()

	node, err := h.nodes.NodeByID(nodeID)
	if err != nil || node == nil || node.GetStatus() != pb.NodeStatus_NODE_STATUS_READY {
		return
	}
	// Heartbeats wait while this runs, but a restore may have re-armed the
	// node from new state, or the leadership ended, since the timer fired.
	h.mu.Lock()
	still := h.active && h.ctx == ctx && h.timers[nodeID] == nil
	h.mu.Unlock()
	if !still {
		return
	}
	// The marking is conditional on the node read above: a registration or
	// ready-marking that commits first (Register does not wait for this, and
	// a marking that gave up on its context may still commit late) makes it
	// change nothing, so no node is marked down after it was answered OK.
	desc := fmt.Sprintf("no heartbeat for %s", h.ttl)
	if err := h.nodes.MarkDown(ctx, nodeID, desc, node.GetModifyIndex()); err != nil {
		if errors.Is(err, fsm.ErrNodeChanged) {
			h.logger.Debug("node changed since its timer fired; not marked down", "node_id", nodeID)
			return
		}
		h.logger.Error("marking node down", "node_id", nodeID, "error", err)
		return
	}
	h.logger.Warn("node marked down", "node_id", nodeID, "name", node.GetName(), "reason", desc)
}

// markDownTimeout bounds one down-marking proposal of a heartbeat timer.
const markDownTimeout = 30 * time.Second

// serverNodes gives heartbeat timers the server's state and raft.
type serverNodes struct{ s *Server }

var _ heartbeatNodes = serverNodes{}

func (n serverNodes) Nodes() ([]*pb.Node, error) { return n.s.fsm.State().Nodes(nil) }

func (n serverNodes) NodeByID(id string) (*pb.Node, error) { return n.s.fsm.State().NodeByID(nil, id) }

func (n serverNodes) MarkDown(ctx context.Context, id, reason string, modifyIndex uint64) error {
	ctx, cancel := context.WithTimeout(ctx, markDownTimeout)
	defer cancel()
	_, err := n.s.setNodeStatus(ctx, id, pb.NodeStatus_NODE_STATUS_DOWN, reason, modifyIndex)
	return err
}

func (n serverNodes) MarkReady(ctx context.Context, id string) error {
	_, err := n.s.setNodeStatus(ctx, id, pb.NodeStatus_NODE_STATUS_READY, "heartbeat resumed", 0)
	return err
}

// setNodeStatus proposes a node status change stamped with the server clock,
// conditional on the node's modify index when ifModifyIndex is not 0.
// The evaluations of the jobs with allocs on the node travel with it (a
// node down: its allocs are lost and replaced; back up: it learns what to
// stop), and of every system job when the node comes back.
func (s *Server) setNodeStatus(ctx context.Context, nodeID string, status pb.NodeStatus, desc string, ifModifyIndex uint64) (uint64, error) {
	nodeEvals, err := evals.ForNode(s.fsm.State().Snapshot(), s.cfg.Clock.Now(), nodeID, pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE,
		status == pb.NodeStatus_NODE_STATUS_READY)
	if err != nil {
		return 0, err
	}
	if h := s.cfg.hooks; h != nil && h.beforeNodeStatus != nil {
		h.beforeNodeStatus(nodeID)
	}
	idx, err := s.raftApply(ctx, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
		NodeId:        nodeID,
		Status:        status,
		Description:   desc,
		UpdatedAt:     s.cfg.Clock.Now().UnixNano(),
		IfModifyIndex: ifModifyIndex,
		Evals:         nodeEvals,
	})
	if err != nil {
		return idx, err
	}
	// A plan may have placed on the node between the read above and the
	// apply (the node was still ready): its job needs an evaluation too, or
	// an alloc of a down node would never be marked lost.
	if err := s.evalNewcomers(ctx, nodeID, nodeEvals); err != nil {
		s.logger.Warn("evaluating jobs placed on a node while its status changed", "node", nodeID, "error", err)
	}
	return idx, nil
}

// evalNewcomers proposes an evaluation for each job with a live alloc on
// the node that none of have covers.
func (s *Server) evalNewcomers(ctx context.Context, nodeID string, have []*pb.Evaluation) error {
	covered := map[string]bool{}
	for _, e := range have {
		covered[e.GetJobId()] = true
	}
	now, err := evals.ForNode(s.fsm.State().Snapshot(), s.cfg.Clock.Now(), nodeID, pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE, false)
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
	_, err = s.raftApply(ctx, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: missing})
	return err
}
