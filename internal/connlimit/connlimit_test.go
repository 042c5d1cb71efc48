package connlimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"berth.dev/berth/internal/testutil"
)

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) lines() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), "connection refused: too many connections")
}

func listen(t *testing.T, cfg Config) *Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := Wrap(l, cfg)
	t.Cleanup(func() { _ = wl.Close() })
	return wl
}

// acceptAll accepts into a channel until the listener closes.
func acceptAll(l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	return ch
}

func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitClosed waits (up to 10 s) until the server closed c: reading what
// it sent (a gRPC server's settings) ends in EOF or a reset, not the
// test's deadline.
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection not closed by the server within 10s")
	}
}

// The N+1th connection from one IP is closed at once, counted, and logged
// once per interval; closing one of the N frees a slot.
func TestExcessConnectionFromOneIPIsClosed(t *testing.T) {
	logs := &logBuffer{}
	clk := testutil.NewManualClock()
	l := listen(t, Config{Name: "rpc", MaxPerIP: 2, LogInterval: time.Minute, Clock: clk,
		Logger: hclog.New(&hclog.LoggerOptions{Output: logs})})
	accepted := acceptAll(l)
	a, b := dial(t, l), dial(t, l)
	first, second := <-accepted, <-accepted
	_, _ = a, b

	extra := dial(t, l)
	waitClosed(t, extra)
	if l.Refused() != 1 || l.Open("127.0.0.1") != 2 || logs.lines() != 1 {
		t.Fatalf("refused %d, open %d, log lines %d; want 1, 2, 1", l.Refused(), l.Open("127.0.0.1"), logs.lines())
	}
	// Within the interval: counted, not logged again.
	waitClosed(t, dial(t, l))
	if l.Refused() != 2 || logs.lines() != 1 {
		t.Fatalf("refused %d, log lines %d; want 2, 1", l.Refused(), logs.lines())
	}
	clk.Advance(time.Minute)
	waitClosed(t, dial(t, l))
	if l.Refused() != 3 || logs.lines() != 2 {
		t.Fatalf("after the interval: refused %d, log lines %d; want 3, 2", l.Refused(), logs.lines())
	}

	// A slot freed is a connection accepted; the kept ones still work.
	_ = first.Close()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := l.Open("127.0.0.1"); n != 1 {
			return errors.New("slot not freed")
		}
		return nil
	})
	c := dial(t, l)
	third := <-accepted
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(third, make([]byte, 1)); err != nil {
		t.Fatalf("the connection in the freed slot: %v", err)
	}
	if _, err := b.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(second, make([]byte, 1)); err != nil {
		t.Fatalf("a kept connection: %v", err)
	}
}

// A connection that sends nothing within the handshake timeout is closed
// (on a gRPC server, whose own connection timeout would be 2 minutes),
// and its slot freed; a gRPC client that spoke in time keeps working past
// the timeout on the same connection.
func TestSilentRPCConnectionIsClosedAfterTheHandshakeTimeout(t *testing.T) {
	l := listen(t, Config{Name: "rpc", MaxPerIP: 10, HandshakeTimeout: 200 * time.Millisecond})
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(cc)
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}

	silent := dial(t, l)
	waitClosed(t, silent)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := l.Open("127.0.0.1"); n != 1 {
			return errors.New("the silent connection's slot is not freed")
		}
		return nil
	})
	// The timeout has passed (the silent connection is gone): the client
	// that spoke still uses its connection.
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call after the handshake timeout: %v", err)
	}
	if l.Open("127.0.0.1") != 1 {
		t.Fatalf("the client reconnected: %d connections", l.Open("127.0.0.1"))
	}
}
