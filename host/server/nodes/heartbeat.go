package nodes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/pb"
)

// HeartbeatNodes is what heartbeat timers need of the server: the nodes in
// local state, and a way to mark one down or ready (Statuses).
type HeartbeatNodes interface {
	Nodes() ([]*pb.Node, error)
	NodeByID(id string) (*pb.Node, error)
	// MarkDown proposes the node's ready → down change, conditional on the
	// node still being at modifyIndex (fsm.ErrNodeChanged otherwise).
	MarkDown(ctx context.Context, id, reason string, modifyIndex uint64) error
	// MarkReady proposes the node's down → ready change.
	MarkReady(ctx context.Context, id string) error
}

// Heartbeater keeps, on the leader only, one timer per ready node. Heartbeats
// Reset timers in memory; raft sees only status changes: a timer firing marks
// its node down, and a heartbeat from a down node marks it ready.
//
// Its state changes only under mu, each change whole: the leader loop
// starts and stops it, a snapshot restore re-arms it (a no-op unless it
// runs; its down-markings in flight cancelled), and Shutdown closes it, so no interleaving of those can leave
// timers running on a server that does not lead.
type Heartbeater struct {
	nodes  HeartbeatNodes
	clock  clock.Clock
	ttl    time.Duration
	grace  time.Duration
	logger hclog.Logger
	// perSecond, when positive, bounds the heartbeats the leader is asked
	// for per second: the TTL grows with the nodes (ScaledTTL).
	perSecond float64

	mu     sync.Mutex
	active bool
	closed bool
	// idleReady is the ready nodes in state at idleAt, which TTL counts
	// while the timers do not run: recounted at most once a second, not
	// on each heartbeat of the herd that reaches a new leader.
	idleReady int
	idleAt    time.Time
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

func NewHeartbeater(nodes HeartbeatNodes, clk clock.Clock, ttl, grace time.Duration, logger hclog.Logger) *Heartbeater {
	return &Heartbeater{
		nodes: nodes, clock: clk, ttl: ttl, grace: grace, logger: logger,
		timers: make(map[string]*nodeTimer), expiring: make(map[string]chan struct{}),
	}
}

// WithMaxPerSecond makes the TTL nodes are told grow with their number, so
// that they send about r heartbeats per second in all at most (ScaledTTL);
// zero keeps the TTL fixed. It is set before Start.
func (h *Heartbeater) WithMaxPerSecond(r float64) *Heartbeater {
	h.perSecond = r
	return h
}

// ScaledTTL is the TTL of a cluster of n nodes whose leader takes at most
// perSecond heartbeats a second on average: min, or n·24/7/perSecond
// seconds when that is longer (Nomad's min_heartbeat_ttl and
// max_heartbeats_per_second). Nomad's clients heartbeat once per TTL;
// berth's every third of it less up to a quarter of that (host/client's
// interval), 7/8 of TTL/3 apart on average: 24/7 (about 3.4) times per TTL.
func ScaledTTL(min time.Duration, perSecond float64, n int) time.Duration {
	if perSecond <= 0 || n <= 0 {
		return min
	}
	// 24 and 7 apart, so a whole number of seconds comes out exact.
	return max(min, time.Duration(float64(n)*24*float64(time.Second)/(7*perSecond)))
}

// TTL is the TTL a node is told now and its timer armed with: ScaledTTL
// over the nodes whose timers run. Until the timers start (a new leader
// before its barrier passed, which the re-homing nodes reach first) and
// once they stopped, it counts the ready nodes in state, as Start will:
// the nodes' number did not change with the leader.
func (h *Heartbeater) TTL() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.timers)
	if !h.active && h.perSecond > 0 {
		if now := h.clock.Now(); h.idleAt.IsZero() || now.Sub(h.idleAt) >= time.Second || now.Before(h.idleAt) {
			h.idleReady, h.idleAt = h.readyLocked(), now
		}
		n = max(n, h.idleReady)
	}
	return ScaledTTL(h.ttl, h.perSecond, n)
}

// readyLocked counts the ready nodes in state.
func (h *Heartbeater) readyLocked() int {
	nodes, err := h.nodes.Nodes()
	if err != nil {
		h.logger.Error("listing nodes for the heartbeat TTL", "error", err)
		return 0
	}
	ready := 0
	for _, node := range nodes {
		if node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
			ready++
		}
	}
	return ready
}

// Start arms a timer of TTL plus grace for every ready node, so a new
// leader does not mark down nodes that were heartbeating to the old one.
// The leader loop calls it once its barrier passed.
func (h *Heartbeater) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.active {
		return
	}
	h.active = true
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.armAllLocked()
}

// Rearm restarts every timer from the nodes in state now, after a snapshot
// restore replaced them. The down-markings in flight were decided on the
// replaced state: their context is cancelled, as stop's are, and rearm
// returns once they ended, with the timers armed from the restored nodes.
// It does nothing unless the timers run: a leader whose barrier has not
// passed yet arms them from the restored state when it starts, and a
// server that no longer leads must not arm any.
func (h *Heartbeater) Rearm() {
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

// Stop stops every timer; the leader loop calls it when leadership ends.
// It returns once no down-marking of this leadership is in flight (their
// context is cancelled, so they end at once): a proposal it already handed
// to raft is then in the log before the next leadership's barrier, which
// applies it before that leadership arms its timers.
func (h *Heartbeater) Stop() {
	h.mu.Lock()
	inFlight := h.stopLocked()
	h.mu.Unlock()
	waitAll(inFlight)
}

// Close stops the timers for good (the server is shutting down). Unlike
// Stop it does not wait for down-markings in flight: raft shuts down next,
// which ends them, and no later leadership will follow.
func (h *Heartbeater) Close() {
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

// Reset (re)arms the node's timer; it does nothing unless the timers run.
func (h *Heartbeater) Reset(nodeID string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.active {
		h.armLocked(nodeID, d)
	}
}

// Heartbeat handles a heartbeat from a known node: it re-arms the node's
// timer for d, waiting first (bounded by ctx) for a down-marking of the
// node already in flight, and then marks the node ready if it is not. A
// Heartbeat that landed while a down-marking was in flight therefore never
// answers OK for a node about to go down; it brings the node back.
func (h *Heartbeater) Heartbeat(ctx context.Context, nodeID string, d time.Duration) error {
	heartbeatsReceived.Inc()
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

// Tracked reports whether a timer is armed for the node.
func (h *Heartbeater) Tracked(nodeID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.timers[nodeID]
	return ok
}

// stopLocked stops the timers and cancels the down-markings in flight,
// returning the channels that close when those end.
func (h *Heartbeater) stopLocked() []chan struct{} {
	if h.cancel != nil {
		h.cancel()
	}
	h.active = false
	h.stopTimersLocked()
	return h.inFlightLocked()
}

// inFlightLocked returns the channels that close when the down-markings
// in flight end.
func (h *Heartbeater) inFlightLocked() []chan struct{} {
	inFlight := make([]chan struct{}, 0, len(h.expiring))
	for _, done := range h.expiring {
		inFlight = append(inFlight, done)
	}
	return inFlight
}

func (h *Heartbeater) stopTimersLocked() {
	for id, nt := range h.timers {
		nt.timer.Stop()
		delete(h.timers, id)
	}
}

// armAllLocked arms a TTL-plus-grace timer for every ready node without one.
// Listing under mu keeps a concurrent stop from interleaving with it.
func (h *Heartbeater) armAllLocked() {
	nodes, err := h.nodes.Nodes()
	if err != nil {
		h.logger.Error("listing nodes for heartbeat timers", "error", err)
		return
	}
	ready := 0
	for _, node := range nodes {
		if node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
			ready++
		}
	}
	// The nodes were told a TTL scaled to about this many nodes: each
	// gets that and the grace to reach this leader.
	d := ScaledTTL(h.ttl, h.perSecond, max(ready, len(h.timers))) + h.grace
	n := 0
	for _, node := range nodes {
		if _, ok := h.timers[node.GetId()]; !ok && node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
			h.armLocked(node.GetId(), d)
			n++
		}
	}
	h.logger.Debug("heartbeat timers started", "nodes", n, "ttl", d)
}

func (h *Heartbeater) armLocked(nodeID string, d time.Duration) {
	if nt := h.timers[nodeID]; nt != nil {
		nt.timer.Stop()
	}
	h.gen++
	gen := h.gen
	h.timers[nodeID] = &nodeTimer{gen: gen, timer: h.clock.AfterFunc(d, func() { h.expire(nodeID, gen) })}
}

func (h *Heartbeater) expire(nodeID string, gen uint64) {
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
	heartbeatsMissed.Inc()
	h.logger.Warn("node marked down", "node_id", nodeID, "name", node.GetName(), "reason", desc)
}
