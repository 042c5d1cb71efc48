package server

import (
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// heartbeater keeps, on the leader only, one timer per ready node. Heartbeats
// reset timers in memory; raft sees only status changes: a timer firing marks
// its node down, and a heartbeat from a down node marks it ready.
type heartbeater struct {
	s      *Server
	clock  Clock
	ttl    time.Duration
	grace  time.Duration
	logger hclog.Logger

	mu     sync.Mutex
	active bool
	timers map[string]*nodeTimer
}

type nodeTimer struct {
	timer Timer
	// gen tells a stale firing (raced with a reset) from the current one.
	gen uint64
}

func newHeartbeater(s *Server, clock Clock, ttl, grace time.Duration, logger hclog.Logger) *heartbeater {
	return &heartbeater{s: s, clock: clock, ttl: ttl, grace: grace, logger: logger, timers: make(map[string]*nodeTimer)}
}

// initialize starts timers for every ready node with TTL plus grace, so a
// new leader does not mark down nodes that were heartbeating to the old one.
func (h *heartbeater) initialize() {
	// Active before the listing: a node registered in between gets its timer
	// from Register's reset rather than none at all.
	h.mu.Lock()
	h.active = true
	h.mu.Unlock()
	nodes, err := h.s.fsm.State().Nodes(nil)
	if err != nil {
		h.logger.Error("listing nodes for heartbeat timers", "error", err)
		return
	}
	n := 0
	for _, node := range nodes {
		if node.GetStatus() == pb.NodeStatus_NODE_STATUS_READY && !h.tracked(node.GetId()) {
			h.reset(node.GetId(), h.ttl+h.grace)
			n++
		}
	}
	h.logger.Debug("heartbeat timers started", "nodes", n, "ttl", h.ttl+h.grace)
}

// reset (re)arms the node's timer; it does nothing on a non-leader.
func (h *heartbeater) reset(nodeID string, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.active {
		return
	}
	nt := h.timers[nodeID]
	if nt == nil {
		nt = &nodeTimer{}
		h.timers[nodeID] = nt
	} else if nt.timer != nil {
		nt.timer.Stop()
	}
	nt.gen++
	gen := nt.gen
	nt.timer = h.clock.AfterFunc(d, func() { h.expire(nodeID, gen) })
}

// stopAll stops every timer; called when leadership ends.
func (h *heartbeater) stopAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active = false
	for id, nt := range h.timers {
		if nt.timer != nil {
			nt.timer.Stop()
		}
		delete(h.timers, id)
	}
}

// tracked reports whether a timer is armed for the node.
func (h *heartbeater) tracked(nodeID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.timers[nodeID]
	return ok
}

func (h *heartbeater) expire(nodeID string, gen uint64) {
	h.mu.Lock()
	nt := h.timers[nodeID]
	current := h.active && nt != nil && nt.gen == gen
	if current {
		delete(h.timers, nodeID)
	}
	h.mu.Unlock()
	if !current {
		return
	}
	node, err := h.s.fsm.State().NodeByID(nil, nodeID)
	if err != nil || node == nil || node.GetStatus() != pb.NodeStatus_NODE_STATUS_READY {
		return
	}
	desc := fmt.Sprintf("no heartbeat for %s", h.ttl)
	if _, err := h.s.setNodeStatus(nodeID, pb.NodeStatus_NODE_STATUS_DOWN, desc); err != nil {
		h.logger.Error("marking node down", "node_id", nodeID, "error", err)
		return
	}
	h.logger.Warn("node marked down", "node_id", nodeID, "name", node.GetName(), "reason", desc)
}

// setNodeStatus proposes a node status change stamped with the server clock.
func (s *Server) setNodeStatus(nodeID string, status pb.NodeStatus, desc string) (uint64, error) {
	return s.raftApply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
		NodeId:      nodeID,
		Status:      status,
		Description: desc,
		UpdatedAt:   s.cfg.Clock.Now().UnixNano(),
	})
}
