package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/server"
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

func TestAttemptTimeoutSplitsWhatIsLeftOfTheTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &Client{}
		if got := c.attemptTimeout(3); got != defaultTTL/3 {
			t.Fatalf("attempt timeout before any server answered = %s, want %s", got, defaultTTL/3)
		}
		c.learn(nil, 3000) // TTL 3s: 2.7s usable after an acknowledgement
		c.lastOK = contact{server: "a", at: time.Now()}
		time.Sleep(time.Second) // the next heartbeat is due
		for _, tt := range []struct {
			left int
			want time.Duration
		}{
			{1, 1700 * time.Millisecond},
			{2, 850 * time.Millisecond},
			{10, 300 * time.Millisecond}, // the floor: a tenth of the TTL
		} {
			if got := c.attemptTimeout(tt.left); got != tt.want {
				t.Errorf("attempt timeout 1s after an acknowledgement, %d servers left, TTL 3s = %s, want %s", tt.left, got, tt.want)
			}
		}
		time.Sleep(time.Hour) // long past the TTL: still the floor
		if got := c.attemptTimeout(1); got != 300*time.Millisecond {
			t.Errorf("attempt timeout past the TTL = %s, want the floor 300ms", got)
		}
		c.learn(nil, 60_000)
		if got := attemptFloor(c.currentTTL()); got != time.Second {
			t.Errorf("floor with a 60s TTL = %s, want 1s", got)
		}
	})
}

// Two servers that answer nothing cost only their shares of the time left:
// the third still answers before the servers would mark the node down.
func TestTwoSilentServersThenAGoodOneKeepTheNodeReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		c := &Client{ctx: context.Background(), pool: rpc.NewPool(), servers: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}}
		defer c.pool.Close()
		c.learn(nil, ttl.Milliseconds())
		acked := time.Now()
		c.lastOK = contact{server: "127.0.0.1:3", at: acked}
		time.Sleep(ttl / 3) // the next heartbeat is due

		var attempts []time.Duration
		var answered time.Time
		err := c.call(func(ctx context.Context, _ pb.NodesClient) error {
			deadline, _ := ctx.Deadline()
			attempts = append(attempts, time.Until(deadline))
			if len(attempts) < 3 {
				<-ctx.Done() // silent
				return status.FromContextError(ctx.Err()).Err()
			}
			answered = time.Now()
			return nil
		})
		if err != nil {
			t.Fatalf("heartbeat with two silent servers and a good one: %v", err)
		}
		if len(attempts) != 3 {
			t.Fatalf("%d attempts, want 3", len(attempts))
		}
		if markedDown := acked.Add(ttl); !answered.Before(markedDown) {
			t.Fatalf("the good server answered %s after the last acknowledgement, not within the TTL %s (attempt timeouts %v)",
				answered.Sub(acked), ttl, attempts)
		}
		for i, d := range attempts {
			if d < attemptFloor(ttl) {
				t.Errorf("attempt %d got %s, under the floor %s", i+1, d, attemptFloor(ttl))
			}
		}
		if c.next != 2 || c.lastContact().server != "127.0.0.1:3" || !c.lastContact().at.Equal(answered) {
			t.Fatalf("after the call: next %d, last contact %+v; want 2, 127.0.0.1:3 at %v", c.next, c.lastContact(), answered)
		}
	})
}

// A server that fails in a way it does not explain is failed over; a
// refusal is the cluster's answer and is not.
func TestCallFailsOverOnEveryErrorButARefusal(t *testing.T) {
	c := &Client{ctx: context.Background(), pool: rpc.NewPool(), servers: []string{"127.0.0.1:1", "127.0.0.1:2"}}
	defer c.pool.Close()
	for _, code := range []codes.Code{codes.Internal, codes.Unknown, codes.ResourceExhausted, codes.Aborted, codes.Unimplemented, codes.Unavailable, codes.DeadlineExceeded} {
		c.next = 0
		var tried []int
		err := c.call(func(context.Context, pb.NodesClient) error {
			tried = append(tried, len(tried))
			if len(tried) == 1 {
				return status.Error(code, "broken")
			}
			return nil
		})
		if err != nil || len(tried) != 2 || c.next != 1 {
			t.Errorf("first server answering %s: err %v after %d attempts, next %d; want the second server to answer", code, err, len(tried), c.next)
		}
	}
	for _, code := range []codes.Code{codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists} {
		c.next = 0
		attempts := 0
		err := c.call(func(context.Context, pb.NodesClient) error {
			attempts++
			return status.Error(code, "no")
		})
		if status.Code(err) != code || attempts != 1 || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("first server refusing with %s: %v after %d attempts; want that code, naming the server, after one attempt", code, err, attempts)
		}
	}
}

// Servers learned from an answer are shuffled: with one seed address, the
// clients of a cluster do not all fail over in the same order.
func TestLearnedServersAreShuffled(t *testing.T) {
	learned := []string{"b:1", "c:1", "d:1", "e:1"}
	second := map[string]int{}
	for range 200 {
		c := &Client{servers: []string{"a:1"}}
		c.learn(append(slices.Clone(learned), "a:1", "b:1"), 0)
		if len(c.servers) != 5 || c.servers[0] != "a:1" || !slices.Equal(slices.Sorted(slices.Values(c.servers[1:])), learned) {
			t.Fatalf("learned servers %v: want a:1 then a permutation of %v", c.servers, learned)
		}
		second[c.servers[1]]++
	}
	// All four must come right after the seed some time (all 200 missing
	// one has probability 4·(3/4)^200, about 1e-25).
	for _, s := range learned {
		if second[s] == 0 {
			t.Fatalf("learned server %s never came first after the seed in 200 clients: %v", s, second)
		}
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
