package client

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

func TestNodeIDPersistsAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	id, err := loadNodeID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !uuid.Valid(id) {
		t.Fatalf("node id %q is not a UUID", id)
	}
	again, err := loadNodeID(dir)
	if err != nil || again != id {
		t.Fatalf("second load = %q, %v; want %q", again, err, id)
	}
	if err := os.WriteFile(filepath.Join(dir, "client", "node-id"), []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadNodeID(dir); err == nil || !strings.Contains(err.Error(), `"garbage"`) {
		t.Fatalf("corrupt node id: %v", err)
	}
}

func TestParseMemTotal(t *testing.T) {
	got, err := parseMemTotal([]byte("MemFree: 10 kB\nMemTotal:       16384 kB\n"))
	if err != nil || got != 16384*1024 {
		t.Fatalf("parseMemTotal = %d, %v", got, err)
	}
	if _, err := parseMemTotal([]byte("MemTotal: lots kB\n")); err == nil {
		t.Fatal("non-numeric MemTotal accepted")
	}
	if _, err := parseMemTotal([]byte("nothing here")); err == nil {
		t.Fatal("missing MemTotal accepted")
	}
}

func TestNewWithoutServersFails(t *testing.T) {
	if _, err := New(Config{DataDir: t.TempDir()}); err != ErrNoServers {
		t.Fatalf("New without servers: %v, want ErrNoServers", err)
	}
}

func startServer(t *testing.T) *server.Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(&server.Config{
		Name:             "s1",
		RPCAddr:          lis.Addr().String(),
		RaftAddr:         "127.0.0.1:0",
		RaftTimeoutScale: 0.2,
		HeartbeatTTL:     time.Second,
		Logger:           testutil.Logger(t).Named("server"),
	}, lis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !s.IsLeader() {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return s
}

func waitStatus(t *testing.T, s *server.Server, id string, want pb.NodeStatus) *pb.Node {
	t.Helper()
	var n *pb.Node
	testutil.WaitFor(t, 15*time.Second, func() (err error) {
		n, err = s.State().NodeByID(nil, id)
		if err != nil {
			return err
		}
		if n == nil || n.GetStatus() != want {
			return fmt.Errorf("node %s: %v", id, n)
		}
		return nil
	})
	return n
}

func TestClientRegistersFailsOverAndKeepsItsIdentity(t *testing.T) {
	s := startServer(t)
	dir := t.TempDir()
	// The first server address is dead: the client must move on to the next.
	// Nothing listens on port 1: connections are refused at once.
	dead := "127.0.0.1:1"
	secrets := &memSecrets{}
	c, err := New(Config{
		Identity: secrets,
		DataDir:  dir,
		NodeName: "worker-1",
		Servers:  []string{dead, serverRPC(t, s)},
		Logger:   testutil.Logger(t).Named("client"),
		Drivers: func() map[string]*pb.DriverInfo {
			return map[string]*pb.DriverInfo{"mock": {Name: "mock", Detected: true, Healthy: true}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	if n.GetName() != "worker-1" || n.GetFingerprint().GetCpuCores() < 1 || !n.GetDrivers()["mock"].GetHealthy() {
		t.Fatalf("registered node = %v", n)
	}
	// Heartbeats keep it ready past several TTLs (1s each), without a
	// single down-and-back (that would move its modify index).
	since := time.Now()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if last := c.lastContact(); last.at.Sub(since) < 2500*time.Millisecond {
			return fmt.Errorf("last heartbeat %s after the start of the wait", last.at.Sub(since))
		}
		return nil
	})
	if now := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY); now.GetModifyIndex() != n.GetModifyIndex() {
		t.Fatalf("node changed while heartbeating: modify index %d, was %d (%q)", now.GetModifyIndex(), n.GetModifyIndex(), now.GetStatusDescription())
	}

	// Stopped, the node goes down; restarted on the same data dir, the same
	// node comes back ready.
	c.Shutdown()
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_DOWN)
	c2, err := New(Config{DataDir: dir, NodeName: "worker-1", Servers: []string{serverRPC(t, s)}, Identity: secrets, Logger: testutil.Logger(t).Named("client2")})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Shutdown()
	if c2.NodeID() != c.NodeID() {
		t.Fatalf("restarted client has id %s, was %s", c2.NodeID(), c.NodeID())
	}
	back := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	if back.GetCreateIndex() != n.GetCreateIndex() {
		t.Fatalf("re-registration made a new node: create index %d, was %d", back.GetCreateIndex(), n.GetCreateIndex())
	}
	nodes, _ := s.State().Nodes(nil)
	if len(nodes) != 1 {
		t.Fatalf("%d nodes after restart, want 1", len(nodes))
	}
}

func TestClientRegistersAgainWhenServersForgetTheNode(t *testing.T) {
	s := startServer(t)
	c, err := New(Config{DataDir: t.TempDir(), Servers: []string{serverRPC(t, s)}, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	// Deregister behind the client's back (as a snapshot restore would).
	buf, err := fsm.Encode(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: c.NodeID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.ResultOf(context.Background(), s.Raft().Apply(buf, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
}

// serverRPC waits until the server has recorded its own address in state
// (it does so right after winning the election) and returns it.
func serverRPC(t *testing.T, s *server.Server) string {
	t.Helper()
	var addr string
	testutil.WaitFor(t, 10*time.Second, func() error {
		m, err := s.State().ServerByID(nil, s.ID())
		if err != nil || m == nil {
			return fmt.Errorf("server %s has not recorded its address: %v", s.ID(), err)
		}
		addr = m.GetRpcAddr()
		return nil
	})
	return addr
}

func TestParseCPUInfoMHz(t *testing.T) {
	in := []byte("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu MHz\t\t: 2894.562\ncache size\t: 512 KB\n")
	if got, ok := parseCPUInfoMHz(in); !ok || got != 2894 {
		t.Fatalf("parseCPUInfoMHz = %d, %v; want 2894, true", got, ok)
	}
	if _, ok := parseCPUInfoMHz([]byte("processor : 0\n")); ok {
		t.Fatal("a cpuinfo without a cpu MHz line parsed")
	}
}

func TestNodeResourcesSubtractNothingButReportReserved(t *testing.T) {
	fp := fingerprint()
	if fp.GetCpuTotalMhz() <= 0 || fp.GetCpuTotalMhz() < int64(fp.GetCpuCores()) {
		t.Fatalf("cpu_total_mhz = %d for %d cores", fp.GetCpuTotalMhz(), fp.GetCpuCores())
	}
	r := nodeResources(fp, 200, 512)
	if r.GetCpuMhz() != fp.GetCpuTotalMhz() || r.GetMemoryMb() != int64(fp.GetMemoryBytes()>>20) ||
		r.GetReservedCpuMhz() != 200 || r.GetReservedMemoryMb() != 512 {
		t.Fatalf("resources = %v from fingerprint %v", r, fp)
	}
	if fp.GetAttributes()["kernel.name"] != "linux" || fp.GetAttributes()["cpu.numcores"] == "" {
		t.Fatalf("attributes = %v", fp.GetAttributes())
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if a := fp.GetAttributes(); a["berth.binary"] != exe || a["berth.version"] != version.Version {
		t.Fatalf("berth.binary %q, berth.version %q; want %q and %q", a["berth.binary"], a["berth.version"], exe, version.Version)
	}
}
