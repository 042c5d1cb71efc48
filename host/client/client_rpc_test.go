package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// fakeAllocs is a hand-written alloc side: one alloc whose task logs live
// in dir; RestartAlloc records its calls.
type fakeAllocs struct {
	allocID, task, dir string

	mu       sync.Mutex
	restarts []string
	dead     bool
}

var errFakeUnknownAlloc = errcode.New(codes.NotFound, "no such alloc on this client")

func (f *fakeAllocs) LogFiles(allocID, task string, stderr bool) ([]string, error) {
	if allocID != f.allocID || task != f.task {
		return nil, fmt.Errorf("alloc %s task %q: %w", allocID, task, errFakeUnknownAlloc)
	}
	stream := "stdout"
	if stderr {
		stream = "stderr"
	}
	return logFiles(f.dir, task+"."+stream)()
}

func (f *fakeAllocs) RestartAlloc(allocID, task string) error {
	if allocID != f.allocID {
		return fmt.Errorf("alloc %s: %w", allocID, errFakeUnknownAlloc)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts = append(f.restarts, allocID+"/"+task)
	return nil
}

func (f *fakeAllocs) TaskDead(allocID, task string) (bool, error) {
	if allocID != f.allocID || task != f.task {
		return false, fmt.Errorf("alloc %s task %q: %w", allocID, task, errFakeUnknownAlloc)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dead, nil
}

var _ allocAccess = (*fakeAllocs)(nil)

func proxyClient(t *testing.T, addr string) pb.ClientProxyClient {
	t.Helper()
	pool := rpc.NewPool()
	t.Cleanup(pool.Close)
	conn, err := pool.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	return pb.NewClientProxyClient(conn)
}

func recvAll(stream grpc.ServerStreamingClient[pb.LogsFrame]) (string, error) {
	var b strings.Builder
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

// TestAllocLogsAndRestartThroughTheServer is `alloc logs` and `alloc
// restart` end to end: a real server, a client whose tunnel is its only
// way in, the logs read from rotated files.
func TestAllocLogsAndRestartThroughTheServer(t *testing.T) {
	s := startServer(t)
	addr := serverRPC(t, s)
	allocs := &fakeAllocs{allocID: "a1", task: "web", dir: t.TempDir()}
	out := writeLog(t, allocs.dir, "web.stdout", "hello from stdout\n")
	writeLog(t, allocs.dir, "web.stderr", "oops on stderr\n")

	c, err := New(Config{
		DataDir: t.TempDir(), Servers: []string{addr}, Logger: testutil.Logger(t).Named("client"),
		allocAccess: allocs, logOptions: logOptions{poll: 5 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if c.TunnelServer() != addr {
			return errors.New("tunnel not open")
		}
		return nil
	})
	px := proxyClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stream, err := px.Logs(ctx, &pb.LogsRequest{AllocId: "a1", Task: "web", NodeId: c.NodeID()})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(stream); err != nil || got != "hello from stdout\n" {
		t.Fatalf("stdout %q, %v", got, err)
	}
	stream, err = px.Logs(ctx, &pb.LogsRequest{AllocId: "a1", Task: "web", NodeId: c.NodeID(), Stderr: true, Origin: "end", Offset: 7})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(stream); err != nil || got != "stderr\n" {
		t.Fatalf("stderr from end-7: %q, %v", got, err)
	}

	// Follow: what the task writes next arrives, until the caller stops.
	fctx, fcancel := context.WithCancel(ctx)
	follow, err := px.Logs(fctx, &pb.LogsRequest{AllocId: "a1", Task: "web", NodeId: c.NodeID(), Follow: true, Origin: "end"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follow.Header(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("more\n")); err != nil {
		t.Fatal(err)
	}
	// The line lands across a rotation (10-byte files): two frames.
	var followed string
	for followed != "more\n" {
		f, err := follow.Recv()
		if err != nil || !strings.HasPrefix("more\n", followed+string(f.GetData())) {
			t.Fatalf("followed %q then %q, %v; want the new line", followed, f.GetData(), err)
		}
		followed += string(f.GetData())
	}
	fcancel()
	if _, err := follow.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("follow after cancel: %v", err)
	}

	// A follow of a task that dies ends after its last words: the stream
	// ends (io.EOF through the server), so `alloc logs -f` exits.
	follow, err = px.Logs(ctx, &pb.LogsRequest{AllocId: "a1", Task: "web", NodeId: c.NodeID(), Follow: true, Origin: "end"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follow.Header(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	allocs.mu.Lock()
	allocs.dead = true
	allocs.mu.Unlock()
	if got, err := recvAll(follow); err != nil || got != "bye\n" {
		t.Fatalf("follow of a dead task: %q, %v; want its last line, then the end", got, err)
	}

	if _, err := px.RestartAlloc(ctx, &pb.RestartAllocRequest{AllocId: "a1", Task: "web", NodeId: c.NodeID()}); err != nil {
		t.Fatal(err)
	}
	allocs.mu.Lock()
	got := fmt.Sprint(allocs.restarts)
	allocs.mu.Unlock()
	if got != "[a1/web]" {
		t.Fatalf("restarts %s, want [a1/web]", got)
	}

	// Refusals keep their codes and name the alloc and the node.
	_, err = px.RestartAlloc(ctx, &pb.RestartAllocRequest{AllocId: "zz", NodeId: c.NodeID()})
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "node "+c.NodeID()) || !strings.Contains(err.Error(), "alloc zz") {
		t.Fatalf("unknown alloc: %v", err)
	}
	stream, err = px.Logs(ctx, &pb.LogsRequest{AllocId: "a1", Task: "web", NodeId: c.NodeID(), Origin: "middle"})
	if err == nil {
		_, err = recvAll(stream)
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node "+c.NodeID()) {
		t.Fatalf("bad origin: %v", err)
	}
}

func TestClientRPCRefusesAnotherNodesRequest(t *testing.T) {
	r := &clientRPC{nodeID: "n1", allocs: &fakeAllocs{allocID: "a1"}}
	_, err := r.RestartAlloc(context.Background(), &pb.RestartAllocRequest{AllocId: "a1", NodeId: "n2"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "request for node n2 reached node n1") {
		t.Fatalf("another node's request: %v", err)
	}
	none := &clientRPC{nodeID: "n1", allocs: &Client{nodeID: "n1"}}
	if _, err := none.RestartAlloc(context.Background(), &pb.RestartAllocRequest{AllocId: "a1"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a client without alloc runners: %v", err)
	}
	if _, err := none.allocs.LogFiles("a1", "", false); !errors.Is(err, ErrNoAllocRuntime) {
		t.Fatalf("logs on a client without alloc runners: %v", err)
	}
}

func TestTunnelStartsAtTheServerThatAnsweredLast(t *testing.T) {
	c := &Client{servers: []string{"a", "b", "c"}, next: 1}
	if got := fmt.Sprint(c.tunnelServers()); got != "[b c a]" {
		t.Fatalf("tunnel order %s, want [b c a]", got)
	}
	c.next = 0
	if got := fmt.Sprint(c.tunnelServers()); got != "[a b c]" {
		t.Fatalf("tunnel order %s, want [a b c]", got)
	}
}

func TestClientRPCSentinelCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrWrongNode:     codes.FailedPrecondition,
		ErrBadLogRequest: codes.InvalidArgument,
	})
}
