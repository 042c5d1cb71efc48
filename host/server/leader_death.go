package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// A follower of hashicorp/raft notices a dead leader only when its
// heartbeat timer fires (every one to two heartbeat timeouts) and finds no
// contact for a whole timeout; the other survivor refuses the first
// candidate's pre-vote until its own timer has fired too, and a refused
// candidate waits one to two election timeouts before asking again. So a
// kill -9 of the leader cost 2.2–8.2 s before a new leader was elected
// (5,000 simulated nodes), where raft needs only a heartbeat timeout to be
// sure nobody heard from the leader.
//
// The leader-death detector closes that gap for the one failure a
// follower can tell apart from a slow or cut-off leader: the leader's
// process is gone. Each follower holds its connection to the leader's
// berth RPC address (the pooled one it forwards writes on) open. When
// the process dies its kernel closes that connection, and a new dial is
// refused: nothing listens on the port any more. Both together are the
// signal. A partition (packets dropped) leaves the connection open and
// makes a dial time out; a stopped (SIGSTOP) or stalled process keeps
// its sockets, so the kernel still accepts the dial. Neither counts:
// they keep raft's own timers.
//
// On the signal every survivor hurries the election (hurryElection): it
// fires raft's heartbeat timer the moment a lease has passed since its
// last contact with the leader, instead of up to a timeout later. The
// hurry never overrides raft's own check: a follower still becomes a
// candidate only when it has heard nothing from the leader for the
// (hurried) heartbeat timeout, so a wrong signal about a live leader that
// still reaches this follower changes nothing.
//
// Missed, and left to raft's timers: a leader that dies before this
// follower's connection to it first came up (just elected, still
// connecting), and a leader restarted on the same address before the
// first probe (the probe reaches the new process). A leader whose RPC
// address is this server's own or a wildcard one is not watched at all:
// a probe would reach this host, not the leader.

// probeTimeout bounds the dial that tells a dead leader from one that
// only dropped a connection. A refused dial answers at once; a dial that
// takes this long is a partition or an overloaded host, not a dead
// process.
const probeTimeout = time.Second

// leaderDeath is what the detector tells tests and logs.
type leaderDeath struct {
	// detected counts leaders this server found dead; hurried counts
	// elections it hurried (detected, still without a new leader once a
	// lease had passed).
	detected atomic.Int64
	hurried  atomic.Int64
	// abandoned counts hurries given up: the leader contacted this server
	// after the detection and its RPC address answered again.
	abandoned atomic.Int64

	// probe, if set, replaces probeRefused (tests).
	probe func(ctx context.Context, addr string) bool
}

// watchLeaderDeath runs on every server for its whole life: while another
// server leads, it watches the connection to that leader and, when the
// leader's process is gone, hurries the election.
func (s *Server) watchLeaderDeath() {
	changes := make(chan raft.Observation, 16)
	observer := raft.NewObserver(changes, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(observer)
	defer s.raft.DeregisterObserver(observer)

	// The address of a leader just elected may not be known yet (it
	// joins the servers table a moment later): look again each second.
	recheck := time.NewTicker(time.Second)
	defer recheck.Stop()
	s.watchLeaders(leaderWatch{
		leader:  s.leaderRPCAddr,
		conn:    s.pool.Conn,
		changes: changes,
		recheck: recheck.C,
	})
}

// leaderWatch is what watchLeaders reads: the leader's RPC address and
// ID, connections to it, raft's leader changes, and a periodic wake-up.
type leaderWatch struct {
	leader  func() (addr, id string)
	conn    func(addr string) (*grpc.ClientConn, error)
	changes <-chan raft.Observation
	recheck <-chan time.Time
}

// watchLeaders is watchLeaderDeath's loop. A leader it cannot watch (no
// address yet, a connection that cannot be made, an address that would
// reach this server itself) is looked at again only on a leader change,
// a recheck tick or shutdown, never in a spin; the reason is logged once
// per leader and address.
func (s *Server) watchLeaders(w leaderWatch) {
	var warned string
	for {
		addr, id := w.leader()
		if id != "" && id != s.id && addr != "" {
			err := s.watchable(addr)
			var conn *grpc.ClientConn
			if err == nil {
				conn, err = w.conn(addr)
			}
			if err == nil {
				warned = ""
				if !s.leaderGone(conn, addr, id, w.changes) {
					if s.shutdownCtx.Err() != nil {
						return
					}
					continue
				}
				s.death.detected.Add(1)
				s.logger.Info("leader's process is gone: its connection closed and a new dial was refused", "leader", id, "rpc", addr)
				s.hurryElection(id, addr, w.changes)
				continue
			}
			if key := id + " " + addr; key != warned {
				warned = key
				s.logger.Warn("cannot watch the leader for its death; raft's timers alone will notice it", "leader", id, "rpc", addr, "error", err)
			}
		}
		select {
		case <-w.changes:
		case <-w.recheck:
		case <-s.shutdownCtx.Done():
			return
		}
	}
}

// errSelfProbe: the leader's RPC address would reach this server, so a
// probe of it says nothing about the leader.
var errSelfProbe = errors.New("the leader's RPC address is this server's own or a wildcard one (a wildcard bind address advertised as is)")

// watchable reports why the leader's RPC address addr cannot be watched:
// it is this server's own, or its host is a wildcard (0.0.0.0, ::), which
// a dial reaches on this very host.
func (s *Server) watchable(addr string) error {
	if addr == s.cfg.RPCAddr {
		return errSelfProbe
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("leader's RPC address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return errSelfProbe
	}
	return nil
}

// leaderGone watches conn, the connection to the leader (id at addr), and
// reports true once it closed and a dial to addr was refused. It returns
// false when raft's leader changes or the server shuts down.
func (s *Server) leaderGone(conn *grpc.ClientConn, addr, id string, changes <-chan raft.Observation) bool {
	ctx, cancel := context.WithCancel(s.shutdownCtx)
	defer cancel()
	go func() {
		for {
			select {
			case <-changes:
				if _, now := s.raft.LeaderWithID(); string(now) != id {
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	probe := s.death.probe
	if probe == nil {
		probe = probeRefused
	}
	return connGone(ctx, conn, addr, probe, nil)
}

// connGone watches conn to addr and reports true once it was up, is not,
// and probe finds the dial to addr refused; false when ctx ends. seen,
// if set, is told each state it acts on (tests).
func connGone(ctx context.Context, conn *grpc.ClientConn, addr string, probe func(context.Context, string) bool, seen func(connectivity.State)) bool {
	wasReady := false
	for {
		state := conn.GetState()
		if seen != nil {
			seen(state)
		}
		switch {
		case state == connectivity.Ready:
			wasReady = true
		case wasReady:
			// The connection was up and is not: the leader closed it
			// (its process ended, or it stopped serving), or an idle
			// timeout did. Only a refused dial says the process is gone.
			// A dying process's kernel closes its connections before
			// its listener, so a dial at once may still connect: every
			// later change of the reconnecting connection (a refused
			// reconnect fails it) probes again, until it is up again.
			if probe(ctx, addr) {
				return true
			}
			if state == connectivity.Idle {
				conn.Connect()
			}
		case state == connectivity.Idle:
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, state) {
			return false
		}
	}
}

// probeRefused dials addr once and reports whether the dial was refused:
// nothing listens there, so the process that did is gone. A dial that
// connects (a stopped or restarted process: the kernel still accepts) or
// times out (a partition) is not a refusal.
func probeRefused(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
