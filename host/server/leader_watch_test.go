package server

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"berth.dev/berth/internal/testutil"
)

// syncBuffer is a log output safe to read while the watcher writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// watchUnwatchable runs watchLeaders on a leader at addr whose connection
// fails with connErr (nil: the test fails if a connection is asked for),
// gives it one recheck tick, and reports the log. The leader is looked up
// again only after a wake-up: a second look-up without one is a spin.
func watchUnwatchable(t *testing.T, addr string, connErr error) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	s := &Server{id: "self", cfg: &Config{RPCAddr: "127.0.0.1:4647"}, shutdownCtx: ctx,
		logger: hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Warn})}
	var lookups, ticks atomic.Int32
	recheck := make(chan time.Time)
	spun := make(chan int32, 1)
	w := leaderWatch{
		leader: func() (string, string) {
			if n := lookups.Add(1); n > ticks.Load()+1 {
				// A spin: report it and hold the spinning goroutine
				// (a spin may not look at shutdown at all).
				select {
				case spun <- n:
				default:
				}
				select {}
			}
			return addr, "leader"
		},
		conn: func(string) (*grpc.ClientConn, error) {
			if connErr == nil {
				t.Errorf("a connection to %s was asked for", addr)
				return nil, errors.New("no")
			}
			return nil, connErr
		},
		changes: make(chan raft.Observation),
		recheck: recheck,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchLeaders(w)
	}()
	ticks.Add(1)
	select {
	case recheck <- time.Now():
	case n := <-spun:
		t.Fatalf("look-up %d of the leader with no wake-up: the watcher spins", n)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if lookups.Load() < 2 {
			return errors.New("the tick did not bring a second look-up")
		}
		return nil
	})
	select {
	case n := <-spun:
		t.Fatalf("look-up %d of the leader with %d wake-ups: the watcher spins", n, ticks.Load())
	default:
	}
	cancel()
	<-done
	return out.String()
}

// TestDeadLeaderWatchWaitsWhenItCannotConnect: a leader address the pool
// cannot make a connection for does not spin the watcher; it looks again
// on a wake-up and logs the reason once.
func TestDeadLeaderWatchWaitsWhenItCannotConnect(t *testing.T) {
	log := watchUnwatchable(t, "10.0.0.3:4647", errors.New("rpc: connecting: bad target"))
	if n := strings.Count(log, "cannot watch the leader"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, log)
	}
}

// TestDeadLeaderWatchRefusesToProbeItself: a leader whose advertised RPC
// address is this server's own or a wildcard (a wildcard bind advertised
// as is) would be probed on this very host, where this server answers: it
// is not watched, and the watcher does not spin.
func TestDeadLeaderWatchRefusesToProbeItself(t *testing.T) {
	for _, addr := range []string{"[::]:4647", "0.0.0.0:4647", ":4647", "127.0.0.1:4647"} {
		log := watchUnwatchable(t, addr, nil)
		if !strings.Contains(log, "own or a wildcard") {
			t.Errorf("%s: no reason logged:\n%s", addr, log)
		}
	}
	s := &Server{cfg: &Config{RPCAddr: "127.0.0.1:4647"}}
	if err := s.watchable("127.0.0.2:4647"); err != nil {
		t.Errorf("another server's address not watchable: %v", err)
	}
}

// blackhole is a loopback address whose dials time out: a listening
// socket with a backlog of 0 whose queue is full and never accepted, so
// the kernel drops further handshakes, as a partition does.
func blackhole(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	// Fill the accept queue until a handshake goes unanswered.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr
			}
			t.Fatalf("dial to the full listener: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	t.Skip("the kernel answered every handshake to a full listener; no timing-out dial on this host")
	return ""
}

// TestProbeTimedOutDialIsNotRefused: a dial that times out (a partition)
// says nothing about the leader's process.
func TestProbeTimedOutDialIsNotRefused(t *testing.T) {
	addr := blackhole(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if probeRefused(ctx, addr) {
		t.Error("a timed-out dial was taken as refused")
	}
}

// TestConnGoneFalseWhenTheProbeTimesOut: the leader's connection drops,
// but a dial to its address times out (a partition, not a dead process):
// connGone keeps watching until its context ends.
func TestConnGoneFalseWhenTheProbeTimesOut(t *testing.T) {
	hole := blackhole(t)
	lis := listen(t)
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ready, seen := readyWatch()
	var probes atomic.Int32
	probe := func(ctx context.Context, _ string) bool {
		defer probes.Add(1)
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer pcancel()
		return probeRefused(pctx, hole)
	}
	gone := make(chan bool, 1)
	go func() { gone <- connGone(ctx, conn, hole, probe, seen) }()
	conn.Connect()
	<-ready
	srv.Stop()
	testutil.WaitFor(t, 15*time.Second, func() error {
		select {
		case g := <-gone:
			gone <- g
			return nil
		default:
		}
		if n := probes.Load(); n < 2 {
			return errors.New("fewer than two probes")
		}
		return nil
	})
	cancel()
	if <-gone {
		t.Fatalf("a dropped connection whose re-dial timed out was taken for a dead leader (%d probes)", probes.Load())
	}
}
