package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/server/clientproxy"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// proxyNode is a hand-written ClientRPC for the proxy tests.
type proxyNode struct {
	pb.UnimplementedClientRPCServer
	mu       sync.Mutex
	restarts []*pb.RestartAllocRequest
	logs     []*pb.LogsRequest
	NextErr  error
	Frames   []string
	// Block makes every call wait for its context to end.
	Block bool
}

func (n *proxyNode) RestartAlloc(ctx context.Context, req *pb.RestartAllocRequest) (*pb.RestartAllocResponse, error) {
	n.mu.Lock()
	n.restarts = append(n.restarts, req)
	block, err := n.Block, n.NextErr
	n.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	return &pb.RestartAllocResponse{}, nil
}

func (n *proxyNode) Logs(req *pb.LogsRequest, stream grpc.ServerStreamingServer[pb.LogsFrame]) error {
	n.mu.Lock()
	n.logs = append(n.logs, req)
	block, frames, refusal := n.Block, n.Frames, n.NextErr
	n.mu.Unlock()
	if refusal != nil {
		return refusal
	}
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	var off int64
	for _, f := range frames {
		if err := stream.Send(&pb.LogsFrame{Data: []byte(f), File: "web.stdout.0", Offset: off}); err != nil {
			return err
		}
		off += int64(len(f))
	}
	if block {
		<-stream.Context().Done()
	}
	return nil
}

func (n *proxyNode) counts() (restarts, logs int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.restarts), len(n.logs)
}

// connectNode keeps nodeID's tunnel open to servers (tried in order).
func connectNode(t *testing.T, nodeID string, node *proxyNode, servers ...*Server) *tunnel.Client {
	t.Helper()
	pool := testNodePool()
	t.Cleanup(pool.Close)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.cfg.RPCAddr)
	}
	c, err := tunnel.Start(tunnel.ClientConfig{
		NodeID:   nodeID,
		Servers:  func() []string { return addrs },
		Conn:     pool.Conn,
		Register: func(r grpc.ServiceRegistrar) { pb.RegisterClientRPCServer(r, node) },
		Backoff:  backoff.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Logger:   testutil.Logger(t).Named("node"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func waitTunnel(t *testing.T, s *Server, nodeID string) *tunnel.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := s.tunnels.Wait(ctx, nodeID)
	if err != nil {
		t.Fatalf("node %s never opened its tunnel to %s: %v", nodeID, s.cfg.Name, err)
	}
	return sess
}

// waitMembers waits until s's state records n servers (locate asks them).
func waitMembers(t *testing.T, s *Server, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		ms, err := s.fsm.State().Servers(nil)
		if err != nil || len(ms) < n {
			return fmt.Errorf("server %s records %d servers (%v), want %d", s.cfg.Name, len(ms), err, n)
		}
		return nil
	})
}

func (tc *testCluster) proxy(s *Server) pb.ClientProxyClient {
	return pb.NewClientProxyClient(tc.conn(s))
}

func readLogs(t *testing.T, stream grpc.ServerStreamingClient[pb.LogsFrame]) (string, error) {
	t.Helper()
	var b bytes.Buffer
	for {
		f, err := stream.Recv()
		if err == io.EOF {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		b.Write(f.GetData())
	}
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestClientProxyReachesANodeOnThisServer(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	node := &proxyNode{Frames: []string{"line 1\n", "line 2\n"}}
	connectNode(t, "node-a", node, s)
	waitTunnel(t, s, "node-a")

	if _, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "node-a", Task: "web"}); err != nil {
		t.Fatal(err)
	}
	if r, _ := node.counts(); r != 1 || node.restarts[0].GetTask() != "web" || node.restarts[0].GetNodeId() != "node-a" {
		t.Fatalf("node saw %d restarts (%v), want one of task web for node-a", r, node.restarts)
	}
	stream, err := tc.proxy(s).Logs(timeout(t, 10*time.Second), &pb.LogsRequest{AllocId: "a1", NodeId: "node-a", Task: "web"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := readLogs(t, stream)
	if err != nil || got != "line 1\nline 2\n" {
		t.Fatalf("logs %q, %v; want both lines", got, err)
	}
}

func TestClientProxyForwardsToTheServerHoldingTheNode(t *testing.T) {
	tc := newTestCluster(t, 2)
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	node := &proxyNode{Frames: []string{"from a\n"}}
	connectNode(t, "node-a", node, a)
	waitTunnel(t, a, "node-a")
	if _, ok := b.tunnels.Session("node-a"); ok {
		t.Fatal("the node is connected to b too; the test needs it on a only")
	}

	if _, err := tc.proxy(b).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "node-a"}); err != nil {
		t.Fatalf("restart through b: %v", err)
	}
	stream, err := tc.proxy(b).Logs(timeout(t, 10*time.Second), &pb.LogsRequest{AllocId: "a1", NodeId: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readLogs(t, stream); err != nil || got != "from a\n" {
		t.Fatalf("logs through b: %q, %v", got, err)
	}
	if r, l := node.counts(); r != 1 || l != 1 {
		t.Fatalf("node saw %d restarts and %d log reads, want one each", r, l)
	}

	// A refusal from the node is not retried, keeps its code and names
	// the node and the server it went through.
	node.mu.Lock()
	node.NextErr = status.Error(codes.NotFound, "alloc a9 is not on this node")
	node.mu.Unlock()
	_, err = tc.proxy(b).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a9", NodeId: "node-a"})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "node node-a") || !strings.Contains(err.Error(), "via server "+a.cfg.Name) {
		t.Fatalf("refusal through b: %v; want NotFound naming node node-a via server %s", err, a.cfg.Name)
	}
	if r, _ := node.counts(); r != 2 {
		t.Fatalf("node saw %d restarts, want 2 (a refusal is not retried)", r)
	}
}

func TestClientProxyLogsOpenWithAnEmptyFrameAndRefuseBeforeIt(t *testing.T) {
	tc := newTestCluster(t, 2)
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	node := &proxyNode{Frames: []string{"data\n"}}
	connectNode(t, "node-a", node, a)
	waitTunnel(t, a, "node-a")
	for _, s := range []*Server{a, b} {
		stream, err := tc.proxy(s).Logs(timeout(t, 10*time.Second), &pb.LogsRequest{AllocId: "a1", NodeId: "node-a"})
		if err != nil {
			t.Fatal(err)
		}
		var frames []string
		for {
			f, err := stream.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, string(f.GetData()))
		}
		// One empty frame, also through b (a's own is not relayed).
		if fmt.Sprintf("%q", frames) != `["" "data\n"]` {
			t.Fatalf("frames through %s: %q; want one empty frame, then the data", s.cfg.Name, frames)
		}
	}
	node.mu.Lock()
	node.NextErr = status.Error(codes.NotFound, `alloc a1 has no task "db"`)
	node.mu.Unlock()
	for _, s := range []*Server{a, b} {
		stream, err := tc.proxy(s).Logs(timeout(t, 10*time.Second), &pb.LogsRequest{AllocId: "a1", NodeId: "node-a", Task: "db"})
		if err != nil {
			t.Fatal(err)
		}
		f, err := stream.Recv()
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "node node-a") {
			t.Fatalf("refusal through %s: frame %v, %v; want NotFound naming node node-a before any frame", s.cfg.Name, f, err)
		}
	}
}

func TestClientProxyNodeNotConnectedAnywhere(t *testing.T) {
	tc := newTestCluster(t, 2)
	waitMembers(t, tc.servers[1], 2)
	start := time.Now()
	_, err := tc.proxy(tc.servers[1]).RestartAlloc(timeout(t, 20*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "abc123"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "node abc123 is not connected to any server") {
		t.Fatalf("call to an unknown node: %v; want Unavailable: node abc123 is not connected to any server", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("giving up took %s", d)
	}
	// A server asked by another (a forwarded call) answers for itself only.
	fwd := metadata.AppendToOutgoingContext(timeout(t, 20*time.Second), rpc.ForwardedHeader, tc.servers[1].ID())
	_, err = tc.proxy(tc.servers[0]).RestartAlloc(fwd, &pb.RestartAllocRequest{AllocId: "a1", NodeId: "abc123"})
	if want := "node abc123 is not connected to server " + tc.servers[0].cfg.Name; status.Code(err) != codes.Unavailable || status.Convert(err).Message() != want {
		t.Fatalf("forwarded call to an unknown node: %v; want Unavailable: %s", err, want)
	}
	stream, err := tc.proxy(tc.servers[0]).Logs(timeout(t, 20*time.Second), &pb.LogsRequest{AllocId: "a1", NodeId: "abc123"})
	if err == nil {
		_, err = readLogs(t, stream)
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "node abc123 is not connected to any server") {
		t.Fatalf("logs of an unknown node: %v", err)
	}
}

func TestClientProxyRetriesWhileTheNodeConnects(t *testing.T) {
	tc := newTestCluster(t, 2)
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	node := &proxyNode{}
	// The node connects (to a) while the call on b is between attempts.
	time.AfterFunc(100*time.Millisecond, func() { connectNode(t, "late", node, a) })
	if _, err := tc.proxy(b).RestartAlloc(timeout(t, 20*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "late"}); err != nil {
		t.Fatalf("call to a node that connected during the call: %v", err)
	}
	if r, _ := node.counts(); r != 1 {
		t.Fatalf("node saw %d restarts, want 1", r)
	}
}

func TestClientProxyEveryAttemptHasADeadline(t *testing.T) {
	tc := newTestCluster(t, 2, func(c *testConfig) {
		c.proxy.AttemptTimeout = 500 * time.Millisecond
		c.proxy.Backoff = 10 * time.Millisecond
	})
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	node := &proxyNode{Block: true}
	connectNode(t, "stuck", node, a)
	waitTunnel(t, a, "stuck")

	start := time.Now()
	_, err := tc.proxy(b).RestartAlloc(timeout(t, 20*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "stuck"})
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "node stuck") {
		t.Fatalf("call to a node that never answers: %v; want DeadlineExceeded naming node stuck", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("three 500ms attempts took %s", d)
	}
	// Each of b's attempts went to a, which tried once (b retries) and
	// timed out first, so its answer named the node.
	if r, _ := node.counts(); r != clientproxy.Attempts {
		t.Fatalf("node saw %d calls, want %d attempts", r, clientproxy.Attempts)
	}
}

func TestClientProxyFollowEndsWhenTheServerStops(t *testing.T) {
	tc := newTestCluster(t, 2)
	a, b := tc.servers[0], tc.servers[1]
	waitMembers(t, b, 2)
	node := &proxyNode{Frames: []string{"first\n"}, Block: true}
	connectNode(t, "follow", node, a)
	waitTunnel(t, a, "follow")

	stream, err := tc.proxy(b).Logs(context.Background(), &pb.LogsRequest{AllocId: "a1", NodeId: "follow", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := stream.Recv(); err != nil || len(f.GetData()) != 0 {
		t.Fatalf("first frame %q, %v; want the empty one that says the stream is open", f.GetData(), err)
	}
	if f, err := stream.Recv(); err != nil || string(f.GetData()) != "first\n" {
		t.Fatalf("second frame %q, %v", f.GetData(), err)
	}
	start := time.Now()
	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("shutdown with a follow stream in flight took %s (the graceful stop waited for it)", d)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("follow stream after its server stopped: %v; want Unavailable", err)
	}
}

// fakeAllocs is the state store's alloc → node lookup.
type fakeAllocs map[string]string

func (f fakeAllocs) AllocNode(allocID string) (string, error) {
	if n, ok := f[allocID]; ok {
		return n, nil
	}
	return "", status.Errorf(codes.NotFound, "alloc %s not found", allocID)
}

func TestClientProxyFindsTheAllocsNode(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	node := &proxyNode{}
	connectNode(t, "node-a", node, s)
	waitTunnel(t, s, "node-a")

	s.proxy.SetAllocs(nil) // a proxy with no lookup: the request must name the node
	_, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a1"})
	if _, nerr := s.proxy.NodeOf("a1", ""); status.Code(err) != codes.InvalidArgument || !errors.Is(nerr, clientproxy.ErrAllocNodeUnknown) {
		t.Fatalf("no node and no lookup: %v; want InvalidArgument", err)
	}
	if _, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no alloc: %v; want InvalidArgument", err)
	}

	s.proxy.SetAllocs(fakeAllocs{"a1": "node-a"})
	if _, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a1"}); err != nil {
		t.Fatalf("alloc a1 on node-a: %v", err)
	}
	if r, _ := node.counts(); r != 1 || node.restarts[0].GetNodeId() != "node-a" {
		t.Fatalf("node saw %d restarts (%v), want one for node-a", r, node.restarts)
	}
	_, err = tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "node-b"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "alloc a1 runs on node node-a, not on node node-b") {
		t.Fatalf("wrong node: %v", err)
	}
	if _, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown alloc: %v; want NotFound", err)
	}

	// The production lookup reads the state: an alloc it does not hold
	// and no node named is NotFound.
	s.proxy.SetAllocs(clientproxy.StateAllocs(s.fsm.State))
	if _, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown alloc through the state: %v; want NotFound", err)
	}
}

func TestClientProxyMethodsHaveRoutes(t *testing.T) {
	for _, sd := range []grpc.ServiceDesc{pb.ClientProxy_ServiceDesc, pb.TunnelPeers_ServiceDesc} {
		for _, m := range methodNames(sd.Methods) {
			full := "/" + sd.ServiceName + "/" + m
			if r, ok := routes[full]; !ok || r != routeLocal {
				t.Errorf("%s is not routed locally (the proxy finds the node's server itself)", full)
			}
			if _, err := newReply(full); err != nil {
				t.Errorf("newReply(%s): %v", full, err)
			}
		}
	}
}

// openRaw opens a tunnel of nodeID to s that runs no session (a node that
// stopped answering on it), saying it opened at openedAt by its clock.
func (tc *testCluster) openRaw(t *testing.T, s *Server, nodeID string, openedAt time.Time) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	md := metadata.Pairs(tunnel.NodeIDHeader, nodeID, tunnel.OpenedAtHeader, strconv.FormatInt(openedAt.UnixNano(), 10))
	stream, err := pb.NewTunnelClient(tc.conn(s)).Open(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	waitTunnel(t, s, nodeID)
}

func TestClientProxyReleasesTheOlderTunnelElsewhere(t *testing.T) {
	tc := newTestCluster(t, 3)
	a, b, c := tc.servers[0], tc.servers[1], tc.servers[2]
	for _, s := range tc.servers {
		waitMembers(t, s, 3)
	}
	// The node's old tunnel to a, which it left without a word (a's
	// keepalive would take up to 20 s to notice).
	tc.openRaw(t, a, "moved", time.Now().Add(-time.Minute))
	// Its new tunnel, to b: b tells the others, and a closes the old one.
	node := &proxyNode{}
	connectNode(t, "moved", node, b)
	waitTunnel(t, b, "moved")
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, ok := a.tunnels.Session("moved"); ok {
			return errors.New("a still holds the node's older tunnel")
		}
		return nil
	})
	if _, ok := b.tunnels.Session("moved"); !ok {
		t.Fatal("b closed the node's newest tunnel")
	}
	// Calls on a and c reach the node at their first attempt.
	for _, s := range []*Server{a, c} {
		if _, err := tc.proxy(s).RestartAlloc(timeout(t, 10*time.Second), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "moved"}); err != nil {
			t.Fatalf("call on %s: %v", s.cfg.Name, err)
		}
	}
	if r, _ := node.counts(); r != 2 {
		t.Fatalf("node saw %d calls, want 2", r)
	}
}

func TestClientProxyNewestTunnelWinsAcrossServers(t *testing.T) {
	// b holds the node's newer tunnel, a an older one, and the releases
	// that would close a's are lost: lookups must still pick b's.
	tc := newTestCluster(t, 3, func(c *testConfig) { c.proxy.LostReleases = true })
	a, b, c := tc.servers[0], tc.servers[1], tc.servers[2]
	for _, s := range tc.servers {
		waitMembers(t, s, 3)
	}
	now := time.Now()
	tc.openRaw(t, b, "twice", now)
	tc.openRaw(t, a, "twice", now.Add(-time.Second))
	for _, s := range []*Server{a, c} {
		r, err := s.proxy.Find(timeout(t, 10*time.Second), "twice", true)
		if err != nil || r.Server.GetId() != b.ID() {
			t.Fatalf("%s finds %v (session %v), %v; want server %s", s.cfg.Name, r.Server, r.Session, err, b.cfg.Name)
		}
	}
	// A first attempt on a takes its own session; only a retry asks.
	if r, err := a.proxy.Find(timeout(t, 10*time.Second), "twice", false); err != nil || r.Session == nil {
		t.Fatalf("a's first attempt: %v, %v; want its own session", r, err)
	}
	if r, err := b.proxy.Find(timeout(t, 10*time.Second), "twice", true); err != nil || r.Session == nil {
		t.Fatalf("b's retry: %v, %v; want its own (newest) session", r, err)
	}
}
