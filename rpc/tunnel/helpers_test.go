package tunnel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// testServer is a server's gRPC endpoint with only the Tunnel service.
type testServer struct {
	name string
	addr string
	reg  *Registry
	srv  *grpc.Server
}

// startServer serves a registry on addr ("127.0.0.1:0" for a new port, or
// the address of a stopped server to restart it there).
func startServer(t testing.TB, name, addr string, ka Keepalive) *testServer {
	t.Helper()
	var lis net.Listener
	var err error
	// A restarted server's port may still be held by the old listener for
	// a moment.
	testutil.WaitFor(t, 5*time.Second, func() error {
		lis, err = net.Listen("tcp", addr)
		return err
	})
	s := &testServer{
		name: name,
		addr: lis.Addr().String(),
		reg:  NewRegistry(RegistryConfig{Name: name, Keepalive: ka, Logger: testutil.Logger(t).Named(name)}),
		srv:  grpc.NewServer(rpc.ServerOptions()...),
	}
	pb.RegisterTunnelServer(s.srv, s.reg)
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(s.stop)
	return s
}

func (s *testServer) stop() {
	s.reg.Close()
	s.srv.Stop()
}

// session waits for nodeID's session on s.
func (s *testServer) session(t testing.TB, nodeID string) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := s.reg.Wait(ctx, nodeID)
	if err != nil {
		t.Fatalf("node %s never connected to %s: %v", nodeID, s.name, err)
	}
	return sess
}

// fakeNode is a hand-written ClientRPC: RestartAlloc records the request
// and answers NextErr; Logs sends Frames (or blocks while Block is set).
type fakeNode struct {
	pb.UnimplementedClientRPCServer
	name string

	mu       sync.Mutex
	restarts []*pb.RestartAllocRequest
	NextErr  error
	Frames   [][]byte
	// Block makes every call wait for its context to end.
	Block atomic.Bool
}

func (f *fakeNode) RestartAlloc(ctx context.Context, req *pb.RestartAllocRequest) (*pb.RestartAllocResponse, error) {
	if f.Block.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts = append(f.restarts, req)
	if err := f.NextErr; err != nil {
		return nil, err
	}
	// The answer says which node process answered, through a header.
	return &pb.RestartAllocResponse{}, grpc.SetHeader(ctx, metadata.Pairs("answered-by", f.name))
}

func (f *fakeNode) Logs(req *pb.LogsRequest, stream grpc.ServerStreamingServer[pb.LogsFrame]) error {
	if f.Block.Load() {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	f.mu.Lock()
	frames := f.Frames
	f.mu.Unlock()
	var off int64
	for _, d := range frames {
		if err := stream.Send(&pb.LogsFrame{Data: d, File: req.GetAllocId() + "." + req.GetTask(), Offset: off}); err != nil {
			return err
		}
		off += int64(len(d))
	}
	return nil
}

func (f *fakeNode) restartCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.restarts)
}

// startClient keeps nodeID's tunnel open to servers (tried in order) and
// serves node on it.
func startClient(t testing.TB, nodeID string, node *fakeNode, ka Keepalive, servers ...*testServer) *Client {
	t.Helper()
	pool := rpc.NewPool()
	t.Cleanup(pool.Close)
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.addr)
	}
	c, err := Start(ClientConfig{
		NodeID:    nodeID,
		Servers:   func() []string { return addrs },
		Conn:      pool.Conn,
		Register:  func(r grpc.ServiceRegistrar) { pb.RegisterClientRPCServer(r, node) },
		Keepalive: ka,
		Backoff:   backoff.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		Logger:    testutil.Logger(t).Named("client-" + node.name),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// restart calls RestartAlloc on sess and returns which node answered.
func restart(ctx context.Context, sess *Session, allocID string) (string, error) {
	var md metadata.MD
	_, err := pb.NewClientRPCClient(sess.Conn()).RestartAlloc(ctx, &pb.RestartAllocRequest{AllocId: allocID}, grpc.Header(&md))
	if err != nil {
		return "", err
	}
	if v := md.Get("answered-by"); len(v) == 1 {
		return v[0], nil
	}
	return "", errors.New("answer names no node")
}

// rawOpen opens a tunnel stream for nodeID that runs no yamux session: a
// node that connected and then stopped answering.
func rawOpen(t *testing.T, s *testServer, nodeID string) pb.Tunnel_OpenClient {
	t.Helper()
	pool := rpc.NewPool()
	t.Cleanup(pool.Close)
	conn, err := pool.Conn(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := pb.NewTunnelClient(conn).Open(metadata.AppendToOutgoingContext(ctx, NodeIDHeader, nodeID))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("server refused the raw tunnel: %v", err)
	}
	return stream
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var fast = Keepalive{Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond}

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }
