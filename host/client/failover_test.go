package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/host/server"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// silentProxy relays TCP to a server until it is cut; from then on it
// keeps every connection, old and new, open and answers nothing: a server
// whose packets are silently dropped.
type silentProxy struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{lis: lis, target: target}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *silentProxy) addr() string { return p.lis.Addr().String() }

func (p *silentProxy) serve() {
	for {
		down, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, down)
		cut := p.cut
		p.mu.Unlock()
		if cut {
			go func() { _, _ = io.Copy(io.Discard, down) }()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, up)
		p.mu.Unlock()
		go p.relay(up, down)
		go p.relay(down, up)
	}
}

// relay copies src to dst until the proxy is cut, then reads and drops.
func (p *silentProxy) relay(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *silentProxy) silence() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

func (p *silentProxy) close() {
	p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// A client whose server goes silent fails over to another server within
// its TTL, so the node is never marked down (with a call timeout as long
// as the TTL, the leader marked a healthy node down).
func TestClientFailsOverFromASilentServerBeforeItsTTL(t *testing.T) {
	const ttl = 2 * time.Second
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(&server.Config{
		Name:             "s1",
		RPCAddr:          lis.Addr().String(),
		RaftAddr:         "127.0.0.1:0",
		RaftTimeoutScale: 0.2,
		HeartbeatTTL:     ttl,
		Logger:           testutil.Logger(t).Named("server"),
	}, lis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	direct := serverRPC(t, s)
	proxy := newSilentProxy(t, direct)

	// The client knows only the proxy; it learns the server's own address
	// from the servers' answers.
	c, err := New(Config{DataDir: t.TempDir(), Servers: []string{proxy.addr()}, Logger: testutil.Logger(t).Named("client")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	registered := waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	testutil.WaitFor(t, 15*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !slices.Contains(c.servers, direct) || c.lastOK.server != proxy.addr() {
			return fmt.Errorf("client servers %v, last answered by %q; want %s learned and the proxy in use", c.servers, c.lastOK.server, direct)
		}
		return nil
	})

	proxy.silence()
	cutAt := time.Now()
	// Heartbeats go on through the server's own address for three TTLs.
	testutil.WaitFor(t, 30*time.Second, func() error {
		last := c.lastContact()
		if time.Since(cutAt) < 3*ttl || last.server != direct || last.at.Before(cutAt.Add(2*ttl)) {
			return fmt.Errorf("%s since the cut, last answer from %s %s after it", time.Since(cutAt), last.server, last.at.Sub(cutAt))
		}
		return nil
	})
	n, err := s.State().NodeByID(nil, c.NodeID())
	if err != nil {
		t.Fatal(err)
	}
	if n.GetStatus() != pb.NodeStatus_NODE_STATUS_READY || n.GetModifyIndex() != registered.GetModifyIndex() {
		t.Fatalf("node after its server went silent: %s (%q), modify index %d, was %d at registration: it flapped",
			n.GetStatus(), n.GetStatusDescription(), n.GetModifyIndex(), registered.GetModifyIndex())
	}
}

func TestAttemptTimeoutIsAThirdOfTheServersTTL(t *testing.T) {
	c := &Client{}
	if got := c.attemptTimeout(); got != defaultTTL/3 {
		t.Fatalf("attempt timeout before any server answered = %s, want %s", got, defaultTTL/3)
	}
	c.learn(nil, 1500)
	if got := c.attemptTimeout(); got != 500*time.Millisecond {
		t.Fatalf("attempt timeout with a 1.5s TTL = %s, want 500ms", got)
	}
}

func TestClientsShuffleTheirServers(t *testing.T) {
	servers := []string{"a:1", "b:1", "c:1", "d:1"}
	first := map[string]int{}
	for range 200 {
		got := shuffled(servers)
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, servers) {
			t.Fatalf("shuffled(%v) = %v: not a permutation", servers, got)
		}
		first[got[0]]++
	}
	// Each server leads about a quarter of the lists; all four must lead
	// some (all 200 missing one has probability 4·(3/4)^200, about 1e-25).
	for _, s := range servers {
		if first[s] == 0 {
			t.Fatalf("server %s never came first in 200 shuffles: %v", s, first)
		}
	}
	if !slices.Equal(servers, []string{"a:1", "b:1", "c:1", "d:1"}) {
		t.Fatalf("shuffled changed its argument: %v", servers)
	}
}

// When no server answers, the next call starts one server further, so a
// silent first server does not take every call's first attempt.
func TestFailedCallRotatesTheFirstServer(t *testing.T) {
	c := &Client{ctx: context.Background(), pool: rpc.NewPool(), servers: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}}
	defer c.pool.Close()
	unavailable := func(context.Context, pb.NodesClient) error { return status.Error(codes.Unavailable, "down") }
	for _, want := range []int{1, 2, 0} {
		if err := c.call(unavailable); status.Code(err) != codes.Unavailable {
			t.Fatalf("call with every server down: %v, want Unavailable", err)
		}
		if c.next != want {
			t.Fatalf("after a failed call the first server is %d, want %d", c.next, want)
		}
	}
	// A call that fails on its first server and is answered by the next
	// sticks to the one that answered.
	attempts := 0
	if err := c.call(func(context.Context, pb.NodesClient) error {
		attempts++
		if attempts == 1 {
			return status.Error(codes.DeadlineExceeded, "silent")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if c.next != 1 || c.lastContact().server != "127.0.0.1:2" {
		t.Fatalf("after failing over, next = %d, last answer from %q; want 1, 127.0.0.1:2", c.next, c.lastContact().server)
	}
}
