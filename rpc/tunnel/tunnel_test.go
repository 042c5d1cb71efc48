package tunnel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

func TestRoundTrip(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1", Frames: [][]byte{[]byte("hello "), []byte("world")}}
	c := startClient(t, "node-1", node, Keepalive{}, srv)
	sess := srv.session(t, "node-1")
	// The server registers the session as the client learns it was
	// accepted; either may come first.
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := c.Server(); got != srv.addr {
			return errf("client reports server %q, want %q", got, srv.addr)
		}
		return nil
	})

	who, err := restart(ctxTimeout(t, 5*time.Second), sess, "a1")
	if err != nil || who != "n1" {
		t.Fatalf("RestartAlloc answered by %q, %v; want n1", who, err)
	}
	if node.restartCount() != 1 || node.restarts[0].GetAllocId() != "a1" {
		t.Fatalf("node saw restarts %v, want one of a1", node.restarts)
	}

	stream, err := pb.NewClientRPCClient(sess.Conn()).Logs(ctxTimeout(t, 5*time.Second), &pb.LogsRequest{AllocId: "a1", Task: "web"})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	for {
		f, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.GetFile() != "a1.web" || f.GetOffset() != int64(got.Len()) {
			t.Errorf("frame file %q offset %d, want a1.web at %d", f.GetFile(), f.GetOffset(), got.Len())
		}
		got.Write(f.GetData())
	}
	if got.String() != "hello world" {
		t.Fatalf("logs %q, want %q", got.String(), "hello world")
	}
}

func TestLargeMessagesBothWays(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	// Over gRPC's 4 MiB default both ways: the tunnel's ends must use
	// rpc.MaxMessageSize.
	big := bytes.Repeat([]byte("0123456789abcdef"), (20<<20)/16)
	node := &fakeNode{name: "n1", Frames: [][]byte{big, big[:7<<20]}}
	startClient(t, "node-1", node, Keepalive{}, srv)
	sess := srv.session(t, "node-1")

	stream, err := pb.NewClientRPCClient(sess.Conn()).Logs(ctxTimeout(t, 30*time.Second), &pb.LogsRequest{AllocId: "a1", Task: strings.Repeat("t", 6<<20)})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for {
		f, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.GetData(), big[:len(f.GetData())]) {
			t.Fatal("a large frame arrived corrupted")
		}
		sizes = append(sizes, len(f.GetData()))
	}
	if len(sizes) != 2 || sizes[0] != len(big) || sizes[1] != 7<<20 {
		t.Fatalf("frame sizes %v, want [%d %d]", sizes, len(big), 7<<20)
	}
}

func TestManyConcurrentStreams(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	var frames [][]byte
	for i := range 50 {
		frames = append(frames, bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i*37))
	}
	node := &fakeNode{name: "n1", Frames: frames}
	startClient(t, "node-1", node, Keepalive{}, srv)
	sess := srv.session(t, "node-1")
	want := bytes.Join(frames, nil)

	const streams = 64
	var wg sync.WaitGroup
	errs := make(chan error, streams*2)
	for range streams {
		wg.Add(2)
		go func() {
			defer wg.Done()
			stream, err := pb.NewClientRPCClient(sess.Conn()).Logs(ctxTimeout(t, 30*time.Second), &pb.LogsRequest{AllocId: "a"})
			if err != nil {
				errs <- err
				return
			}
			var got []byte
			for {
				f, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				got = append(got, f.GetData()...)
			}
			if !bytes.Equal(got, want) {
				errs <- errf("a stream got %d bytes, want %d in order", len(got), len(want))
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := restart(ctxTimeout(t, 30*time.Second), sess, "a"); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := node.restartCount(); n != streams {
		t.Errorf("node saw %d restarts, want %d", n, streams)
	}
}

func TestClientReconnectsAfterTheStreamBreaks(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1"}
	startClient(t, "node-1", node, Keepalive{}, srv)
	first := srv.session(t, "node-1")

	// The server drops the session, as when the stream breaks.
	first.Close()
	select {
	case <-first.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("closed session never reported done")
	}
	var second *Session
	testutil.WaitFor(t, 10*time.Second, func() error {
		s, ok := srv.reg.Session("node-1")
		if !ok || s == first {
			return errors.New("node has not reconnected")
		}
		second = s
		return nil
	})
	if _, err := restart(ctxTimeout(t, 5*time.Second), second, "a1"); err != nil {
		t.Fatalf("call after reconnect: %v", err)
	}
	// A call on the old session fails Unavailable, naming the node.
	_, err := restart(ctxTimeout(t, 5*time.Second), first, "a1")
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "node node-1") {
		t.Fatalf("call on a closed session: %v; want Unavailable naming node node-1", err)
	}

	// The whole server restarts on the same address: the client comes back.
	addr := srv.addr
	srv.stop()
	srv2 := startServer(t, "s1-again", addr, Keepalive{})
	third := srv2.session(t, "node-1")
	if _, err := restart(ctxTimeout(t, 5*time.Second), third, "a2"); err != nil {
		t.Fatalf("call after the server restarted: %v", err)
	}
}

func TestClientFollowsTheServerList(t *testing.T) {
	a := startServer(t, "a", "127.0.0.1:0", Keepalive{})
	b := startServer(t, "b", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1"}
	c := startClient(t, "node-1", node, Keepalive{}, a, b)
	a.session(t, "node-1")
	a.stop()
	sess := b.session(t, "node-1")
	if _, err := restart(ctxTimeout(t, 5*time.Second), sess, "a1"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := c.Server(); got != b.addr {
			return errf("client reports server %q, want %q", got, b.addr)
		}
		return nil
	})
}

func TestNewestSessionOfANodeWins(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	old := rawOpen(t, srv, "node-1")
	oldSess := srv.session(t, "node-1")

	node := &fakeNode{name: "new"}
	startClient(t, "node-1", node, Keepalive{}, srv)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s, _ := srv.reg.Session("node-1"); s == oldSess {
			return errors.New("the old session is still registered")
		}
		return nil
	})
	select {
	case <-oldSess.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced session was not closed")
	}
	// The old stream ends on the node's side too.
	recvEnded := make(chan error, 1)
	go func() {
		for {
			if _, err := old.Recv(); err != nil {
				recvEnded <- err
				return
			}
		}
	}()
	select {
	case <-recvEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced stream stayed open")
	}
	sess, _ := srv.reg.Session("node-1")
	if who, err := restart(ctxTimeout(t, 5*time.Second), sess, "a1"); err != nil || who != "new" {
		t.Fatalf("call answered by %q, %v; want the new session", who, err)
	}
	if got := srv.reg.Nodes(); len(got) != 1 {
		t.Fatalf("registry holds %v, want one node", got)
	}
}

func TestDeadlineHonouredWhenTheNodeDoesNotAnswer(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})

	t.Run("silent session", func(t *testing.T) {
		rawOpen(t, srv, "silent")
		sess := srv.session(t, "silent")
		start := time.Now()
		_, err := restart(ctxTimeout(t, 300*time.Millisecond), sess, "a1")
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "node silent") {
			t.Fatalf("call to a silent node: %v; want DeadlineExceeded naming node silent", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("call took %s, past its 300ms deadline", d)
		}
	})
	t.Run("handler never returns", func(t *testing.T) {
		node := &fakeNode{name: "stuck"}
		node.Block.Store(true)
		startClient(t, "stuck", node, Keepalive{}, srv)
		sess := srv.session(t, "stuck")
		start := time.Now()
		_, err := restart(ctxTimeout(t, 300*time.Millisecond), sess, "a1")
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "node stuck") {
			t.Fatalf("call to a stuck handler: %v; want DeadlineExceeded naming node stuck", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("call took %s, past its 300ms deadline", d)
		}
	})
}

func TestErrorsNameTheNodeAndKeepTheirCode(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1", NextErr: status.Error(codes.NotFound, "alloc a9 is not on this node")}
	startClient(t, "node-7", node, Keepalive{}, srv)
	sess := srv.session(t, "node-7")
	_, err := restart(ctxTimeout(t, 5*time.Second), sess, "a9")
	if status.Code(err) != codes.NotFound {
		t.Fatalf("code %v, want NotFound: %v", status.Code(err), err)
	}
	if msg := status.Convert(err).Message(); msg != "node node-7: alloc a9 is not on this node" {
		t.Fatalf("message %q does not name the node first", msg)
	}

	node.Block.Store(true)
	stream, err := pb.NewClientRPCClient(sess.Conn()).Logs(ctxTimeout(t, 200*time.Millisecond), &pb.LogsRequest{AllocId: "a9"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "node node-7") {
		t.Fatalf("stream error %v; want DeadlineExceeded naming node node-7", err)
	}
}

func TestKeepaliveClosesADeadSession(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", fast)
	rawOpen(t, srv, "dead")
	sess := srv.session(t, "dead")
	select {
	case <-sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a session whose node never answers pings stayed open")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, ok := srv.reg.Session("dead"); ok {
			return errors.New("dead session still registered")
		}
		return nil
	})
}

func TestCleanShutdownOnBothSides(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1"}
	node.Block.Store(true)
	c := startClient(t, "node-1", node, Keepalive{}, srv)
	sess := srv.session(t, "node-1")

	// A follow-like stream in flight does not hold the client's shutdown.
	stream, err := pb.NewClientRPCClient(sess.Conn()).Logs(context.Background(), &pb.LogsRequest{AllocId: "a"})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("client Close did not return")
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Fatalf("stream in flight after client close: %v; want Unavailable or Canceled", err)
	}
	select {
	case <-sess.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server kept the session of a closed client")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := srv.reg.Nodes(); len(n) != 0 {
			return errf("registry still holds %v", n)
		}
		return nil
	})
	if c.Server() != "" {
		t.Fatalf("closed client reports server %q", c.Server())
	}

	// The server side: Close ends every session and refuses new ones.
	node2 := &fakeNode{name: "n2"}
	c2 := startClient(t, "node-2", node2, Keepalive{}, srv)
	sess2 := srv.session(t, "node-2")
	srv.reg.Close()
	select {
	case <-sess2.Done():
	default:
		t.Fatal("registry Close returned with a session open")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s := c2.Server(); s != "" {
			return errf("client still reports server %q", s)
		}
		return nil
	})
	pool := rpc.NewPool()
	defer pool.Close()
	conn, _ := pool.Conn(srv.addr)
	st, err := pb.NewTunnelClient(conn).Open(metadata.AppendToOutgoingContext(ctxTimeout(t, 5*time.Second), NodeIDHeader, "node-3"))
	if err == nil {
		_, err = st.Header()
		if err == nil {
			_, err = st.Recv()
		}
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Open on a closed registry: %v; want Unavailable", err)
	}
}

func TestOpenWithoutANodeIDIsRefused(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	pool := rpc.NewPool()
	defer pool.Close()
	conn, _ := pool.Conn(srv.addr)
	st, err := pb.NewTunnelClient(conn).Open(ctxTimeout(t, 5*time.Second))
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Open without a node: %v; want InvalidArgument", err)
	}
}

func TestCloseOlderClosesOnlyAnOlderSession(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1"}
	before := time.Now()
	startClient(t, "node-1", node, Keepalive{}, srv)
	sess := srv.session(t, "node-1")
	// The node says when it opened the tunnel, by its clock.
	if at := sess.OpenedAt(); at.Before(before) || at.After(time.Now()) {
		t.Fatalf("session opened at %s, not during the test", at)
	}
	if srv.reg.CloseOlder("node-1", sess.OpenedAt()) {
		t.Fatal("a session as new as the other tunnel was closed")
	}
	if srv.reg.CloseOlder("node-2", time.Now()) {
		t.Fatal("closed a session of a node that has none")
	}
	if !srv.reg.CloseOlder("node-1", sess.OpenedAt().Add(time.Nanosecond)) {
		t.Fatal("an older session was not closed")
	}
	select {
	case <-sess.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the released session stayed open")
	}
	// The node opens a new one, as after any break.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s, ok := srv.reg.Session("node-1"); !ok || s == sess {
			return errors.New("node has not reconnected")
		}
		return nil
	})
}

func TestOpenWithABadOpenedAtIsRefused(t *testing.T) {
	srv := startServer(t, "s1", "127.0.0.1:0", Keepalive{})
	pool := rpc.NewPool()
	defer pool.Close()
	conn, _ := pool.Conn(srv.addr)
	md := metadata.Pairs(NodeIDHeader, "n1", OpenedAtHeader, "yesterday")
	st, err := pb.NewTunnelClient(conn).Open(metadata.NewOutgoingContext(ctxTimeout(t, 5*time.Second), md))
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node n1") {
		t.Fatalf("Open with a bad opened-at: %v; want InvalidArgument naming node n1", err)
	}
}

func TestClientBacksOffFromAServerWithoutTunnels(t *testing.T) {
	// A server that serves no Tunnel (an older version) refuses every
	// Open with Unimplemented; the client moves on to the next server.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer()
	go func() { _ = old.Serve(lis) }()
	defer old.Stop()
	good := startServer(t, "good", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1"}
	c := startClient(t, "node-1", node, Keepalive{}, &testServer{name: "old", addr: lis.Addr().String()}, good)
	good.session(t, "node-1")
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := c.Server(); got != good.addr {
			return errf("client on %q, want %q", got, good.addr)
		}
		return nil
	})
}

// Start refuses a config it cannot run with, each with its own coded
// error: no node, no way to reach a server, no reconnect policy.
func TestStartRefusesAnIncompleteConfig(t *testing.T) {
	servers := func() []string { return []string{"127.0.0.1:1"} }
	conn := func(string) (*grpc.ClientConn, error) { return nil, errors.New("unused") }
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
		want error
	}{
		{"no node", ClientConfig{Servers: servers, Conn: conn, Backoff: fixedBackoff(time.Millisecond)}, ErrNoNodeID},
		{"no servers", ClientConfig{NodeID: "n1", Conn: conn, Backoff: fixedBackoff(time.Millisecond)}, ErrNoServers},
		{"no backoff", ClientConfig{NodeID: "n1", Servers: servers, Conn: conn}, ErrNoBackoff},
	} {
		c, err := Start(tc.cfg)
		if c != nil {
			c.Close()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Start = %v, want %v", tc.name, err, tc.want)
		}
	}
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNoNodeID: codes.InvalidArgument, ErrNoServers: codes.InvalidArgument, ErrNoBackoff: codes.InvalidArgument,
	})
}

// fixedBackoff waits the same after every failure.
type fixedBackoff time.Duration

func (f fixedBackoff) Delay(int) time.Duration { return time.Duration(f) }
