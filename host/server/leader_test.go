package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// barrierGate holds every new leader of a test cluster before its barrier
// until the test opens it, so a test can act "between election and
// barrier" without depending on how fast the barrier is.
type barrierGate struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once

	mu sync.Mutex
	// waiting counts the requests waiting for a barrier now, by server
	// name and method.
	waiting map[[2]string]int
}

func newBarrierGate(t *testing.T) *barrierGate {
	g := &barrierGate{entered: make(chan struct{}, 16), release: make(chan struct{}), waiting: map[[2]string]int{}}
	t.Cleanup(g.open)
	return g
}

func (g *barrierGate) hold(ctx context.Context) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
	case <-ctx.Done():
	}
}

func (g *barrierGate) open() { g.once.Do(func() { close(g.release) }) }

// option installs the gate (and a leader wait) on every server.
func (g *barrierGate) option(wait time.Duration) clusterOpt {
	return func(c *testConfig) {
		name := c.Name
		c.hooks = &testHooks{
			beforeBarrier: g.hold,
			waitingForBarrier: func(method string, delta int) {
				g.mu.Lock()
				defer g.mu.Unlock()
				g.waiting[[2]string{name, method}] += delta
			},
		}
		c.leaderWait = wait
	}
}

func (g *barrierGate) waiters(s *Server, method string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting[[2]string{s.cfg.Name, method}]
}

func (g *barrierGate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(15 * time.Second):
		t.Fatal("no leader reached its barrier")
	}
}

// waitWaiters waits until n requests for method wait for s's barrier.
func (g *barrierGate) waitWaiters(t *testing.T, s *Server, method string, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := g.waiters(s, method); got != n {
			return fmt.Errorf("%d %s requests wait for %s's barrier, want %d", got, method, s.cfg.Name, n)
		}
		return nil
	})
}

func TestRequestsToANewLeaderWaitForItsBarrier(t *testing.T) {
	gate := newBarrierGate(t)
	tc := newTestCluster(t, 1, gate.option(time.Minute))
	s := tc.servers[0]
	gate.waitEntered(t)

	// A write and a consistent read reach the leader before its barrier.
	wrote := make(chan error, 1)
	go func() {
		_, err := tc.register(s, testNode("early"))
		wrote <- err
	}()
	read := make(chan *pb.NodeListResponse, 1)
	readErr := make(chan error, 1)
	go func() {
		r, err := pb.NewNodesClient(tc.conn(s)).List(context.Background(), &pb.NodeListRequest{Query: &pb.QueryOptions{Consistent: true}})
		readErr <- err
		read <- r
	}()
	gate.waitWaiters(t, s, pb.Nodes_Register_FullMethodName, 1)
	gate.waitWaiters(t, s, pb.Nodes_List_FullMethodName, 1)
	select {
	case err := <-wrote:
		t.Fatalf("write answered before the barrier: %v", err)
	case err := <-readErr:
		t.Fatalf("consistent read answered before the barrier: %v", err)
	default:
	}

	// A caller that gives up stops waiting, with its own code.
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() { cancelled <- s.awaitLeaderReady(ctx, "test") }()
	gate.waitWaiters(t, s, "test", 1)
	cancel()
	select {
	case err := <-cancelled:
		if status.Code(err) != codes.Canceled || !strings.Contains(err.Error(), "server "+s.cfg.Name) {
			t.Fatalf("cancelled wait: %v, want Canceled naming server %s", err, s.cfg.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled wait did not return")
	}

	gate.open()
	for _, ch := range []chan error{wrote, readErr} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("request waiting for the barrier: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("request still waiting after the barrier passed")
		}
	}
	if r := <-read; r.GetMeta().GetServedBy() != s.ID() {
		t.Fatalf("consistent read served by %q, want the leader %s", r.GetMeta().GetServedBy(), s.ID())
	}
	for _, m := range []string{pb.Nodes_Register_FullMethodName, pb.Nodes_List_FullMethodName, "test"} {
		if n := gate.waiters(s, m); n != 0 {
			t.Fatalf("%d %s requests still counted as waiting", n, m)
		}
	}
}

func TestNewLeaderAnswersUnavailableWhenItsBarrierOutlastsTheWait(t *testing.T) {
	gate := newBarrierGate(t)
	tc := newTestCluster(t, 1, gate.option(200*time.Millisecond))
	s := tc.servers[0]
	gate.waitEntered(t)

	_, err := tc.register(s, testNode("too-early"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "server "+s.cfg.Name) {
		t.Fatalf("register while the barrier is held: %v, want Unavailable naming server %s", err, s.cfg.Name)
	}
}

func TestWaitForBarrierEndsWhenLeadershipIsLost(t *testing.T) {
	gate := newBarrierGate(t)
	tc := newTestCluster(t, 3, gate.option(time.Minute))
	leader := tc.waitLeader()

	done := make(chan error, 1)
	go func() {
		_, err := tc.register(leader, testNode("orphan"))
		done <- err
	}()
	gate.waitWaiters(t, leader, pb.Nodes_Register_FullMethodName, 1)
	tc.partition(leader)
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "server "+leader.cfg.Name) {
			t.Fatalf("request on a leader that lost leadership: %v, want Unavailable naming server %s", err, leader.cfg.Name)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("request still waiting on a server that lost leadership")
	}
}

// applyGate holds raft's state machine so proposals stay in flight.
type applyGate struct {
	mu      sync.Mutex
	closed  chan struct{} // nil: applies pass
	entered chan struct{}
	// marker, when set, limits the gate to batches with an entry whose
	// bytes contain it (a node ID), so the proposal held is the test's
	// own and not a background one.
	marker []byte
}

func (g *applyGate) hold(logs []*raft.Log) {
	g.mu.Lock()
	ch, entered, marker := g.closed, g.entered, g.marker
	g.mu.Unlock()
	if ch == nil {
		return
	}
	if marker != nil && !slices.ContainsFunc(logs, func(l *raft.Log) bool { return bytes.Contains(l.Data, marker) }) {
		return
	}
	select {
	case entered <- struct{}{}:
	default:
	}
	<-ch
}

// shut holds the batches that contain marker, or every batch when marker
// is "".
func (g *applyGate) shut(marker string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed, g.entered = make(chan struct{}), make(chan struct{}, 1)
	g.marker = nil
	if marker != "" {
		g.marker = []byte(marker)
	}
}

func (g *applyGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

func (g *applyGate) waitEntered(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	ch := g.entered
	g.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatal("no proposal reached the state machine")
	}
}

// endableCtx is a context the test ends by hand, as a cancellation or as
// an expired deadline, so a test can end it exactly while a call is in
// flight.
type endableCtx struct {
	context.Context
	done chan struct{}
	err  error
}

func newEndableCtx(err error) *endableCtx {
	return &endableCtx{Context: context.Background(), done: make(chan struct{}), err: err}
}

func (c *endableCtx) Done() <-chan struct{} { return c.done }

func (c *endableCtx) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

func (c *endableCtx) end() { close(c.done) }

// Register, Heartbeat and raftApply give up when their caller does, while
// the proposal is still in flight; they do not wait for raft's own timeout.
func TestWritesReturnWhenTheirCallerGivesUp(t *testing.T) {
	gate := &applyGate{}
	tc := newTestCluster(t, 1, func(c *testConfig) { c.hooks = &testHooks{beforeApply: gate.hold} })
	t.Cleanup(gate.open) // before the servers shut down
	s := tc.servers[0]
	down := testNode("down")
	if _, err := tc.register(s, down); err != nil {
		t.Fatal(err)
	}
	nodes := s.api.Nodes

	a, b := testNode("a"), testNode("b")
	for _, tt := range []struct {
		name   string
		marker string // the node ID the call's proposal carries
		setup  func()
		call   func(context.Context) error
	}{
		{"raftApply", a.GetId(), nil, func(ctx context.Context) error {
			typ, cmd := nodeRegister(a)
			_, err := s.raftApply(ctx, typ, cmd)
			return err
		}},
		// Each Register is b's first: the registration held by the gate
		// issued b a secret the caller never saw, and registering again
		// without it is refused before any proposal (node_identity.go).
		{"Register", b.GetId(), func() {
			if _, err := s.raftApply(ctx10s(t), fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: b.GetId()}); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context) error {
			_, err := nodes.Register(ctx, &pb.NodeRegisterRequest{Node: b})
			return err
		}},
		{"Heartbeat of a down node", down.GetId(), func() {
			if _, err := s.statuses.Set(context.Background(), down.GetId(), pb.NodeStatus_NODE_STATUS_DOWN, "test", 0); err != nil {
				t.Fatal(err)
			}
		}, func(ctx context.Context) error {
			_, err := nodes.Heartbeat(ctx, &pb.NodeHeartbeatRequest{NodeId: down.GetId()})
			return err
		}},
	} {
		for _, ending := range []error{context.Canceled, context.DeadlineExceeded} {
			if tt.setup != nil {
				tt.setup()
			}
			gate.shut(tt.marker)
			ctx := newEndableCtx(ending)
			done := make(chan error, 1)
			go func() { done <- tt.call(ctx) }()
			gate.waitEntered(t) // the call's proposal is in the state machine, held
			ctx.end()
			select {
			case err := <-done:
				if !errors.Is(err, ending) {
					t.Errorf("%s whose caller ended (%v): %v", tt.name, ending, err)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%s did not return when its caller ended (%v)", tt.name, ending)
			}
			gate.open()
		}
	}
}

// blockingFuture is a raft future that does not complete while the test runs.
type blockingFuture chan struct{}

func (f blockingFuture) Error() error { <-f; return nil }

func TestAwaitReturnsWhenItsContextEnds(t *testing.T) {
	never := make(blockingFuture)
	defer close(never)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fsm.Await(ctx, never) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("await after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("await ignored its context")
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := fsm.Await(ctx, never); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await past its deadline: %v, want context.DeadlineExceeded", err)
	}
}

// RaftConfiguration and consistent reads verify leadership under the
// caller's context: one that already ended gets its own error at once
// (TestRemovePeerWithAnEndedContextChangesNothing shows that such a context
// proposes no membership change).
func TestLeadershipChecksHonourTheCallersContext(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	consistent := &pb.QueryOptions{Consistent: true}
	_, err := (&operatorEndpoint{s: s}).RaftConfiguration(ctx, &pb.RaftConfigurationRequest{Query: consistent})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "server "+s.cfg.Name) {
		t.Fatalf("RaftConfiguration with a cancelled context: %v, want context.Canceled naming server %s", err, s.cfg.Name)
	}
	_, err = s.api.Nodes.List(ctx, &pb.NodeListRequest{Query: consistent})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("consistent List with a cancelled context: %v, want context.Canceled", err)
	}
	// With a live context both answer.
	if _, err := (&operatorEndpoint{s: s}).RaftConfiguration(context.Background(), &pb.RaftConfigurationRequest{Query: consistent}); err != nil {
		t.Fatal(err)
	}
}
