package server

import (
	"context"
	"fmt"
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
// has raft state, it asks the leader to add it as a voter (Operator.Join);
// otherwise, once bootstrap_expect servers know each other, each bootstraps
// raft with the same sorted configuration (raft treats identical bootstraps
// as one). Once in a cluster, every server keeps its own ServerMember record
// in the replicated state current, which is how followers find the leader's
// RPC address for forwarding.
type discovery struct {
	s *Server

	mu    sync.Mutex
	known map[string]*pb.ServerMember
	// recorded is set once this process saw its own record in state; the
	// record disappearing afterwards means an operator removed this server,
	// which must then not add itself back until it is restarted.
	recorded bool
	removed  bool
}

func newDiscovery(s *Server) *discovery {
	return &discovery{s: s, known: make(map[string]*pb.ServerMember)}
}

// observe records a server seen through Ping.
func (d *discovery) observe(m *pb.ServerMember) {
	if m.GetId() == "" || m.GetRpcAddr() == "" {
		return
	}
	d.mu.Lock()
	d.known[m.GetId()] = m
	d.mu.Unlock()
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

// inCluster reports whether this server is part of a raft configuration.
func (s *Server) inCluster() bool {
	if s.hadState {
		return true
	}
	f := s.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

func (d *discovery) run() {
	s := d.s
	d.observe(s.self())
	for {
		wait := s.cfg.RetryInterval
		if !s.inCluster() {
			if err := d.formOrJoin(); err != nil {
				s.logger.Warn("cluster formation", "error", err)
			}
			// Forming a cluster is latency-sensitive; retry sooner.
			wait = min(wait, time.Second)
		} else if err := d.ensureRegistered(); err != nil {
			s.logger.Debug("recording server in state", "error", err)
			wait = min(wait, time.Second)
		}
		select {
		case <-s.shutdownCtx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// formOrJoin is one discovery round of a server without raft state.
func (d *discovery) formOrJoin() error {
	s := d.s
	if s.cfg.BootstrapExpect > 1 && len(s.cfg.RetryJoin) == 0 {
		return fmt.Errorf("bootstrap_expect is %d but retry_join is empty: waiting forever for peers", s.cfg.BootstrapExpect)
	}
	addrs := map[string]bool{}
	for _, a := range s.cfg.RetryJoin {
		addrs[a] = true
	}
	for _, m := range d.list() {
		addrs[m.GetRpcAddr()] = true
	}
	delete(addrs, s.cfg.RPCAddr)

	self := s.self()
	var leaderAddr string
	peerHasState := false
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
		if resp.GetHasState() {
			peerHasState = true
			if resp.GetLeaderRpcAddr() != "" {
				leaderAddr = resp.GetLeaderRpcAddr()
			}
		}
	}

	if peerHasState {
		if leaderAddr == "" {
			return fmt.Errorf("found an existing cluster but it has no leader yet")
		}
		conn, err := s.pool.Conn(leaderAddr)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(s.shutdownCtx, 30*time.Second)
		defer cancel()
		if _, err := pb.NewOperatorClient(conn).Join(ctx, &pb.JoinRequest{Server: self}); err != nil {
			return fmt.Errorf("joining cluster via %s: %w", leaderAddr, err)
		}
		s.logger.Info("joined existing cluster", "leader", leaderAddr)
		return nil
	}

	known := d.list()
	if len(known) < s.cfg.BootstrapExpect {
		s.logger.Info("waiting for peers to bootstrap", "known", len(known), "bootstrap_expect", s.cfg.BootstrapExpect)
		return nil
	}
	conf := raft.Configuration{}
	for _, m := range known {
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

func (s *Server) pingAddr(ctx context.Context, addr string, self *pb.ServerMember) (*pb.PingResponse, error) {
	conn, err := s.pool.Conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewStatusClient(conn).Ping(ctx, &pb.PingRequest{From: self})
}

// ensureRegistered makes the servers table hold this server's current
// addresses, through the leader.
func (d *discovery) ensureRegistered() error {
	s := d.s
	self := s.self()
	cur, err := s.fsm.State().ServerByID(nil, s.id)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if cur != nil {
		d.recorded = true
	} else if d.recorded && !d.removed {
		d.removed = true
		s.logger.Warn("this server was removed from the cluster (force-leave); restart it to rejoin")
	}
	removed := d.removed
	d.mu.Unlock()
	if removed || cur != nil && sameMember(cur, self) {
		return nil
	}
	if s.IsLeader() {
		_, err := s.raftApply(fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: self})
		return err
	}
	addr, _ := s.leaderRPCAddr()
	if addr == "" {
		return fmt.Errorf("no leader known yet")
	}
	conn, err := s.pool.Conn(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.shutdownCtx, 10*time.Second)
	defer cancel()
	_, err = pb.NewOperatorClient(conn).Join(ctx, &pb.JoinRequest{Server: self})
	return err
}

// rejoined clears the removed mark: this server leads, so it is a member.
func (d *discovery) rejoined() {
	d.mu.Lock()
	d.removed = false
	d.mu.Unlock()
}

// sameMember compares the fields a server reports about itself, ignoring
// raft indexes.
func sameMember(a, b *pb.ServerMember) bool {
	a, b = proto.Clone(a).(*pb.ServerMember), proto.Clone(b).(*pb.ServerMember)
	a.CreateIndex, a.ModifyIndex, b.CreateIndex, b.ModifyIndex = 0, 0, 0, 0
	return proto.Equal(a, b)
}
