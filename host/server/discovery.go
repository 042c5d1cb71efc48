package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// discovery forms and keeps the server set without a gossip layer.
//
// A server without raft state pings its retry_join addresses and every
// server those report, learning peers transitively. When some peer already
// has raft state, it asks the leader to add it as a voter (Operator.Join).
// Otherwise the servers bootstrap once exactly bootstrap_expect of them know
// each other and every one of them reports that same set, so all bootstrap
// raft with one identical configuration (raft treats identical bootstraps as
// one; different ones would fork the log).
//
// Once in a cluster, every server keeps its own ServerMember record in the
// replicated state current, which is how followers find the leader's RPC
// address. A server with raft state that finds no leader, or is missing from
// its own configuration (it left, or was removed while down), asks its
// peers for the leader and joins again. So force-leave is for failed
// servers: a live server that is removed comes back, as with Consul.
type discovery struct {
	s *Server

	mu    sync.Mutex
	known map[string]*pb.ServerMember
	// leaderless counts consecutive rounds without a known leader.
	leaderless int
	// belowGateTries counts consecutive registrations refused because
	// this server is below an in-apply gate; until belowGateNext the
	// rounds do not try again (registerRound).
	belowGateTries int
	belowGateNext  time.Time
}

func newDiscovery(s *Server) *discovery {
	return &discovery{s: s, known: make(map[string]*pb.ServerMember)}
}

// observe records a server seen through Ping. A different ID at an address
// already known replaces it: that server was re-created with a new data dir,
// and its old identity can never come back.
func (d *discovery) observe(m *pb.ServerMember) {
	if m.GetId() == "" || m.GetRpcAddr() == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, k := range d.known {
		if id != m.GetId() && k.GetRpcAddr() == m.GetRpcAddr() {
			delete(d.known, id)
		}
	}
	d.known[m.GetId()] = m
}

func (d *discovery) knownByID(id string) *pb.ServerMember {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.known[id]
}

func (d *discovery) list() []*pb.ServerMember {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*pb.ServerMember, 0, len(d.known))
	for _, m := range d.known {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetId() < out[j].GetId() })
	return out
}

func (d *discovery) knownIDs() []string {
	var ids []string
	for _, m := range d.list() {
		ids = append(ids, m.GetId())
	}
	return ids
}

// inCluster reports whether this server is part of a raft configuration.
func (s *Server) inCluster() bool {
	if s.hadState {
		return true
	}
	f := s.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// inOwnConfiguration reports whether this server is a voter in its latest
// raft configuration.
func (s *Server) inOwnConfiguration() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == s.id {
			return srv.Suffrage == raft.Voter
		}
	}
	return false
}

// orphanRounds is how many rounds without a leader make a server with raft
// state ask its peers whether a cluster goes on without it.
const orphanRounds = 3

func (d *discovery) run() {
	s := d.s
	d.observe(s.self())
	for {
		if s.leaving.Load() {
			return
		}
		wait := s.cfg.RetryInterval
		if !s.inCluster() {
			s.forming.Lock()
			if !s.leaving.Load() {
				if err := d.formOrJoin(); err != nil {
					s.logger.Warn("cluster formation", "error", err)
				}
			}
			s.forming.Unlock()
			// Forming a cluster is latency-sensitive; retry sooner.
			wait = min(wait, s.opts.roundRetry)
		} else {
			if err := d.rejoinIfOrphaned(); err != nil {
				s.logger.Warn("rejoining cluster", "error", err)
				wait = min(wait, s.opts.roundRetry)
			}
			if d.registerRound(s.shutdownCtx) != nil {
				wait = min(wait, s.opts.roundRetry)
			}
		}
		select {
		case <-s.shutdownCtx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// survey pings every retry_join address and known server, learning what
// they know, and returns the peers' answers.
func (d *discovery) survey() []*pb.PingResponse {
	s := d.s
	addrs := map[string]bool{}
	for _, a := range s.cfg.RetryJoin {
		addrs[a] = true
	}
	for _, m := range d.list() {
		addrs[m.GetRpcAddr()] = true
	}
	if recorded, err := s.fsm.State().Servers(nil); err == nil {
		for _, m := range recorded {
			addrs[m.GetRpcAddr()] = true
		}
	}
	delete(addrs, s.cfg.RPCAddr)
	delete(addrs, "")

	self := s.self()
	var answers []*pb.PingResponse
	for addr := range addrs {
		ctx, cancel := context.WithTimeout(s.shutdownCtx, 2*time.Second)
		resp, err := s.pingAddr(ctx, addr, self)
		cancel()
		if err != nil {
			s.logger.Debug("discovery ping failed", "addr", addr, "error", err)
			continue
		}
		d.observe(resp.GetServer())
		for _, k := range resp.GetKnown() {
			d.observe(k)
		}
		if resp.GetBootstrapExpect() != uint32(s.cfg.BootstrapExpect) {
			s.logger.Warn("peer has a different bootstrap_expect", "peer", resp.GetServer().GetName(), "theirs", resp.GetBootstrapExpect(), "ours", s.cfg.BootstrapExpect)
		}
		answers = append(answers, resp)
	}
	return answers
}

// joinLeader asks the leader at addr to add this server (idempotent).
func (s *Server) joinLeader(addr string) error {
	conn, err := s.pool.Conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.shutdownCtx, 30*time.Second)
	defer cancel()
	if _, err := pb.NewOperatorClient(conn).Join(ctx, &pb.JoinRequest{Server: s.self()}); err != nil {
		return fmt.Errorf("joining cluster via %s: %w", addr, err)
	}
	return nil
}

// formOrJoin is one discovery round of a server without raft state.
func (d *discovery) formOrJoin() error {
	s := d.s
	if s.cfg.BootstrapExpect > 1 && len(s.cfg.RetryJoin) == 0 {
		return fmt.Errorf("bootstrap_expect is %d but retry_join is empty: waiting forever for peers", s.cfg.BootstrapExpect)
	}
	answers := d.survey()
	var leaderAddr string
	peerHasState := false
	for _, a := range answers {
		if a.GetHasState() {
			peerHasState = true
			if a.GetLeaderRpcAddr() != "" {
				leaderAddr = a.GetLeaderRpcAddr()
			}
		}
	}
	if peerHasState {
		if leaderAddr == "" {
			return fmt.Errorf("found an existing cluster but it has no leader yet")
		}
		if err := s.joinLeader(leaderAddr); err != nil {
			return err
		}
		s.logger.Info("joined existing cluster", "leader", leaderAddr)
		return nil
	}

	ids := d.knownIDs()
	switch {
	case len(ids) < s.cfg.BootstrapExpect:
		s.logger.Info("waiting for peers to bootstrap", "known", len(ids), "bootstrap_expect", s.cfg.BootstrapExpect)
		return nil
	case len(ids) > s.cfg.BootstrapExpect:
		return fmt.Errorf("found %d servers but bootstrap_expect is %d: refusing to bootstrap a cluster some of them would not be in; give every server the same bootstrap_expect", len(ids), s.cfg.BootstrapExpect)
	}
	// Bootstrap only when every peer knows exactly the set we know, so all
	// of them bootstrap with the same configuration.
	peers := 0
	for _, a := range answers {
		var theirs []string
		for _, k := range a.GetKnown() {
			theirs = append(theirs, k.GetId())
		}
		slices.Sort(theirs)
		if !slices.Equal(theirs, ids) {
			s.logger.Info("waiting for peers to agree on the server set", "peer", a.GetServer().GetName(), "theirs", len(theirs), "ours", len(ids))
			return nil
		}
		peers++
	}
	if peers != len(ids)-1 {
		s.logger.Info("waiting to hear from every peer before bootstrapping", "answered", peers, "peers", len(ids)-1)
		return nil
	}
	conf := raft.Configuration{}
	for _, m := range d.list() {
		conf.Servers = append(conf.Servers, raft.Server{
			ID: raft.ServerID(m.GetId()), Address: raft.ServerAddress(m.GetRaftAddr()), Suffrage: raft.Voter,
		})
	}
	if err := s.raft.BootstrapCluster(conf).Error(); err != nil && err != raft.ErrCantBootstrap {
		return fmt.Errorf("bootstrapping raft: %w", err)
	}
	s.logger.Info("bootstrapped cluster", "servers", len(conf.Servers))
	return nil
}

// rejoinIfOrphaned runs on a server with raft state. When it has known no
// leader for a few rounds, or is not in its own configuration, it asks its
// peers for a leader and joins again; a cluster-wide outage (no peer knows a
// leader) changes nothing.
func (d *discovery) rejoinIfOrphaned() error {
	s := d.s
	if s.IsLeader() {
		d.leaderless = 0
		return nil
	}
	if _, id := s.raft.LeaderWithID(); id != "" && s.inOwnConfiguration() {
		d.leaderless = 0
		return nil
	}
	d.leaderless++
	if s.inOwnConfiguration() && d.leaderless < orphanRounds {
		return nil
	}
	for _, a := range d.survey() {
		if addr := a.GetLeaderRpcAddr(); addr != "" && addr != s.cfg.RPCAddr && !s.leaving.Load() {
			if err := s.joinLeader(addr); err != nil {
				return err
			}
			s.logger.Info("rejoined cluster", "leader", addr)
			d.leaderless = 0
			return nil
		}
	}
	return nil
}

func (s *Server) pingAddr(ctx context.Context, addr string, self *pb.ServerMember) (*pb.PingResponse, error) {
	conn, err := s.pool.Conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewStatusClient(conn).Ping(ctx, &pb.PingRequest{From: self})
}

// ensureRegistered makes the servers table hold this server's current
// addresses, through the leader.
func (d *discovery) ensureRegistered(ctx context.Context) error {
	s := d.s
	self := s.self()
	cur, err := s.fsm.State().ServerByID(nil, s.id)
	if err != nil {
		return err
	}
	if cur != nil && sameMember(cur, self) {
		return nil
	}
	if s.IsLeader() {
		// The gates are read from state: not before this leader applied
		// what earlier leaders committed (the next round tries again).
		if !s.leaderReady() {
			return fmt.Errorf("leader %s has not passed its barrier yet", s.cfg.Name)
		}
		if err := s.refuseBelowGates(self); err != nil {
			return err
		}
		_, err := s.raftApply(ctx, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: self})
		return err
	}
	addr, _ := s.leaderRPCAddr()
	if addr == "" {
		return fmt.Errorf("no leader known yet")
	}
	return s.joinLeader(addr)
}

// sameMember compares the fields a server reports about itself, ignoring
// raft indexes.
func sameMember(a, b *pb.ServerMember) bool {
	a, b = proto.Clone(a).(*pb.ServerMember), proto.Clone(b).(*pb.ServerMember)
	a.CreateIndex, a.ModifyIndex, b.CreateIndex, b.ModifyIndex = 0, 0, 0, 0
	return proto.Equal(a, b)
}
