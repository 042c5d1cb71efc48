package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"berth.dev/berth/internal/testutil"
)

// slowTimeouts are raft timeouts so long that no election happens by
// raft's own timers within any of these tests' waits.
const slowTimeouts = 60 * time.Second

// hurryLease is the lease of the detector tests' servers: the timeout a
// hurried election uses.
const hurryLease = 100 * time.Millisecond

// newSlowCluster is a 3-server cluster formed with the usual short
// timeouts, then given slowTimeouts as its configured ones, with a lease
// of hurryLease.
func newSlowCluster(t *testing.T) *testCluster {
	t.Helper()
	tc := newTestCluster(t, 3, func(c *testConfig) { c.raftLease = hurryLease })
	for _, s := range tc.servers {
		if err := s.setNormalTimeouts(slowTimeouts, slowTimeouts); err != nil {
			t.Fatal(err)
		}
	}
	// Every follower watches the leader's connection before the test
	// acts: its connection is up.
	leader := tc.waitLeader()
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, f := range tc.followers(leader) {
			c, err := f.pool.Conn(leader.cfg.RPCAddr)
			if err != nil {
				return err
			}
			if st := c.GetState(); st.String() != "READY" {
				return fmt.Errorf("%s's connection to the leader is %s", f.cfg.Name, st)
			}
		}
		return nil
	})
	return tc
}

func TestDeadLeaderIsReplacedWithoutWaitingForRaftsTimers(t *testing.T) {
	tc := newSlowCluster(t)
	old := tc.waitLeader()
	killed := time.Now()
	if err := old.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Without the detector the survivors' heartbeat timers fire only
	// after 60–120 s; waitLeader gives up after 15.
	leader := tc.waitLeader(old)
	t.Logf("new leader %s %v after the kill", leader.cfg.Name, time.Since(killed))
	var hurried int64
	for _, s := range tc.live(old) {
		if s.death.detected.Load() != 1 {
			t.Errorf("%s detected the leader's death %d times, want 1", s.cfg.Name, s.death.detected.Load())
		}
		hurried += s.death.hurried.Load()
	}
	if hurried == 0 {
		t.Error("no survivor hurried the election")
	}
	// The configured timeouts come back once the leader is known.
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, s := range tc.live(old) {
			if rc := s.raft.ReloadableConfig(); rc.HeartbeatTimeout != slowTimeouts || rc.ElectionTimeout != slowTimeouts {
				return fmt.Errorf("%s still has heartbeat %s, election %s", s.cfg.Name, rc.HeartbeatTimeout, rc.ElectionTimeout)
			}
		}
		return nil
	})
}

// TestCutOffLeaderWithOpenRPCConnectionIsNotADeath: a leader no follower
// hears from over raft, whose RPC connections stay open (its raft traffic
// partitioned, or a stall), leaves the election to raft's timers. (The
// partition here cuts raft's in-memory transports only; a dial that times
// out is TestConnDropWithTimedOutProbeIsNotADeath's.)
func TestCutOffLeaderWithOpenRPCConnectionIsNotADeath(t *testing.T) {
	tc := newSlowCluster(t)
	old := tc.waitLeader()
	tc.partition(old)
	// A hurried follower becomes a candidate one lease after its last
	// contact. Wait until every follower has heard nothing for twenty.
	cutAt := time.Now()
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, f := range tc.followers(old) {
			if since := time.Since(f.raft.LastContact()); since < 20*hurryLease {
				return fmt.Errorf("%s heard from the leader %s ago", f.cfg.Name, since)
			}
		}
		return nil
	})
	for _, f := range tc.followers(old) {
		if st := f.raft.State(); st != raft.Follower {
			t.Errorf("%s is %s %s after the cut, want a follower", f.cfg.Name, st, time.Since(cutAt))
		}
		if n := f.death.detected.Load(); n != 0 {
			t.Errorf("%s took a live leader for dead %d times", f.cfg.Name, n)
		}
	}
}

func TestProbeRefusedOnlyWhenNothingListens(t *testing.T) {
	// A port nothing listens on: the process that did is gone.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := lis.Addr().String()
	lis.Close()
	if !probeRefused(context.Background(), gone) {
		t.Errorf("dial to %s (closed) not taken as refused", gone)
	}

	// A listener that never accepts: a stopped (SIGSTOP) or stalled
	// process, whose kernel still completes the handshake.
	stopped, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()
	if probeRefused(context.Background(), stopped.Addr().String()) {
		t.Error("dial to a listening but never-accepting socket taken as refused")
	}
}

// keepListening is a listener whose Close stops accepting but leaves the
// socket listening (the kernel still completes handshakes): the kernel of
// a dying process may close its connections a moment before its listener.
type keepListening struct{ *net.TCPListener }

func (l keepListening) Close() error { return l.SetDeadline(time.Now()) }

// TestConnGoneWhenTheListenerClosesAfterTheConnections: the first probe
// after the connection closed still connects (the listener is not closed
// yet); the reconnect that fails a moment later probes again, refused.
func TestConnGoneWhenTheListenerClosesAfterTheConnections(t *testing.T) {
	lis := listen(t)
	addr := lis.Addr().String()
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(keepListening{lis.(*net.TCPListener)}) }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	ready, seen := readyWatch()
	var probes atomic.Int32
	probe := func(ctx context.Context, a string) bool {
		refused := probeRefused(ctx, a)
		if probes.Add(1) == 1 {
			if refused {
				t.Error("the first probe was refused: the listener was still open")
			}
			lis.Close() // now the kernel closes the listener too
		}
		return refused
	}
	gone := make(chan bool, 1)
	go func() { gone <- connGone(ctx, conn, addr, probe, seen) }()
	conn.Connect()
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatal("the connection never came up")
	}
	srv.Stop() // closes the connections, not the listener
	if !<-gone {
		t.Fatalf("the closed server was not found gone (%d probes)", probes.Load())
	}
	if n := probes.Load(); n < 2 {
		t.Errorf("%d probes, want the refused one after the first", n)
	}
}

// readyWatch returns a channel closed the first time seen is called with
// Ready: connGone's state callback, for a test to wait for the connection.
func readyWatch() (<-chan struct{}, func(connectivity.State)) {
	ready := make(chan struct{})
	var once sync.Once
	return ready, func(st connectivity.State) {
		if st == connectivity.Ready {
			once.Do(func() { close(ready) })
		}
	}
}
