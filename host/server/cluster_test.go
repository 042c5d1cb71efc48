package server

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// testCluster is n servers in one process: raft over in-memory transports
// (so tests can partition them), gRPC over loopback.
type testCluster struct {
	t       *testing.T
	servers []*Server
	trans   []*raft.InmemTransport
	clock   *testutil.ManualClock
	pool    *rpc.Pool
}

// testConfig is what a clusterOpt changes: a server's Config and the
// options only this package's tests set.
type testConfig struct {
	*Config
	options
}

type clusterOpt func(*testConfig)

func newTestCluster(t *testing.T, n int, opts ...clusterOpt) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, clock: testutil.NewManualClock(), pool: testNodePool()}
	t.Cleanup(tc.pool.Close)
	var rpcAddrs []string
	var listeners []net.Listener
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, lis)
		rpcAddrs = append(rpcAddrs, lis.Addr().String())
	}
	for i := range n {
		tc.startServer(listeners[i], rpcAddrs, n, opts...)
	}
	tc.waitLeader()
	return tc
}

func (tc *testCluster) startServer(lis net.Listener, join []string, expect int, opts ...clusterOpt) *Server {
	tc.t.Helper()
	i := len(tc.servers)
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("raft-%d", i)))
	for j, other := range tc.trans {
		trans.Connect(other.LocalAddr(), other)
		other.Connect(addr, trans)
		_ = j
	}
	cfg := &Config{
		ID:               uuid.Generate(),
		Name:             fmt.Sprintf("s%d", i+1),
		RPCAddr:          lis.Addr().String(),
		BootstrapExpect:  expect,
		RetryJoin:        join,
		RetryInterval:    100 * time.Millisecond,
		HeartbeatTTL:     10 * time.Second,
		HeartbeatGrace:   5 * time.Second,
		RaftTimeoutScale: 0.2,
		Logger:           testutil.Logger(tc.t).Named(fmt.Sprintf("s%d", i+1)),
		Clock:            tc.clock,
	}
	tcfg := &testConfig{Config: cfg, options: options{raftTransport: trans}}
	for _, o := range opts {
		o(tcfg)
	}
	s, err := newServer(tcfg.Config, lis, tcfg.options)
	if err != nil {
		tc.t.Fatalf("starting server %d: %v", i+1, err)
	}
	tc.t.Cleanup(func() { _ = s.Shutdown() })
	tc.servers = append(tc.servers, s)
	tc.trans = append(tc.trans, trans)
	return s
}

// waitLeader waits until exactly one live server leads and every live
// server agrees on it, and returns it.
func (tc *testCluster) waitLeader(excluding ...*Server) *Server {
	tc.t.Helper()
	var leader *Server
	testutil.WaitFor(tc.t, 15*time.Second, func() error {
		leader = nil
		for _, s := range tc.live(excluding...) {
			if s.IsLeader() {
				if leader != nil {
					return fmt.Errorf("two leaders: %s and %s", leader.cfg.Name, s.cfg.Name)
				}
				leader = s
			}
		}
		if leader == nil {
			return fmt.Errorf("no leader")
		}
		for _, s := range tc.live(excluding...) {
			if addr, _ := s.leaderRPCAddr(); addr != leader.cfg.RPCAddr {
				return fmt.Errorf("%s sees leader at %q, want %s", s.cfg.Name, addr, leader.cfg.RPCAddr)
			}
		}
		return nil
	})
	return leader
}

func (tc *testCluster) live(excluding ...*Server) []*Server {
	var out []*Server
outer:
	for _, s := range tc.servers {
		if s.raft.State() == raft.Shutdown {
			continue
		}
		for _, x := range excluding {
			if s == x {
				continue outer
			}
		}
		out = append(out, s)
	}
	return out
}

func (tc *testCluster) followers(leader *Server) []*Server { return tc.live(leader) }

func (tc *testCluster) conn(s *Server) *grpc.ClientConn {
	c, err := tc.pool.Conn(s.cfg.RPCAddr)
	if err != nil {
		tc.t.Fatal(err)
	}
	return c
}

func (tc *testCluster) index(s *Server) int {
	for i, x := range tc.servers {
		if x == s {
			return i
		}
	}
	tc.t.Fatalf("server %s not in cluster", s.cfg.Name)
	return -1
}

// partition cuts s's raft traffic to and from every other server.
func (tc *testCluster) partition(s *Server) {
	i := tc.index(s)
	for j, other := range tc.trans {
		if j != i {
			tc.trans[i].Disconnect(other.LocalAddr())
			other.Disconnect(tc.trans[i].LocalAddr())
		}
	}
}

// heal reconnects s's raft traffic.
func (tc *testCluster) heal(s *Server) {
	i := tc.index(s)
	for j, other := range tc.trans {
		if j != i {
			tc.trans[i].Connect(other.LocalAddr(), other)
			other.Connect(tc.trans[i].LocalAddr(), tc.trans[i])
		}
	}
}

func testNode(name string) *pb.Node {
	return &pb.Node{
		Id:   uuid.Generate(),
		Name: name,
		Fingerprint: &pb.NodeFingerprint{
			Hostname: name, Os: "linux", Arch: "amd64", CpuCores: 2, MemoryBytes: 1 << 30, BerthVersion: "test",
		},
	}
}

func (tc *testCluster) register(s *Server, n *pb.Node) (*pb.NodeRegisterResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pb.NewNodesClient(tc.conn(s)).Register(ctx, &pb.NodeRegisterRequest{Node: n})
}

// waitNode waits until s's local state has the node in the given status.
func waitNode(t *testing.T, s *Server, id string, want pb.NodeStatus) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		n, err := s.State().NodeByID(nil, id)
		if err != nil {
			return err
		}
		if n == nil {
			return fmt.Errorf("%s: node %s not in state", s.cfg.Name, id)
		}
		if n.GetStatus() != want {
			return fmt.Errorf("%s: node %s is %s, want %s", s.cfg.Name, id, n.GetStatus(), want)
		}
		return nil
	})
}

// restart shuts s down and starts a server with the same identity, data dir
// and addresses, returning it (it replaces s in tc.servers).
func (tc *testCluster) restart(s *Server, change func(*Config)) *Server {
	tc.t.Helper()
	i := tc.index(s)
	if err := s.Shutdown(); err != nil {
		tc.t.Fatalf("shutting down %s: %v", s.cfg.Name, err)
	}
	cfg := *s.cfg
	if change != nil {
		change(&cfg)
	}
	addr, trans := raft.NewInmemTransport(tc.trans[i].LocalAddr())
	for j, other := range tc.trans {
		if j != i {
			trans.Connect(other.LocalAddr(), other)
			other.Connect(addr, trans)
		}
	}
	opts := s.opts
	opts.raftTransport = trans
	var lis net.Listener
	testutil.WaitFor(tc.t, 5*time.Second, func() (err error) {
		lis, err = net.Listen("tcp", cfg.RPCAddr)
		return err
	})
	ns, err := newServer(&cfg, lis, opts)
	if err != nil {
		tc.t.Fatalf("restarting %s: %v", cfg.Name, err)
	}
	tc.t.Cleanup(func() { _ = ns.Shutdown() })
	tc.servers[i], tc.trans[i] = ns, trans
	return ns
}
