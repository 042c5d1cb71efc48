package tunnel

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// BenchmarkUnaryOverTunnel is one RestartAlloc from a server to a node over
// the node's tunnel (loopback): the cost every server → client call pays.
func BenchmarkUnaryOverTunnel(b *testing.B) {
	srv := startServer(b, "s1", "127.0.0.1:0", Keepalive{})
	node := &fakeNode{name: "n1"}
	startClient(b, "node-1", node, Keepalive{}, srv)
	sess := srv.session(b, "node-1")
	client := pb.NewClientRPCClient(sess.Conn())
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.RestartAlloc(ctx, &pb.RestartAllocRequest{AllocId: "a"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLogsOverTunnel streams 64 KiB frames from a node to a server.
func BenchmarkLogsOverTunnel(b *testing.B) {
	srv := startServer(b, "s1", "127.0.0.1:0", Keepalive{})
	frame := bytes.Repeat([]byte("x"), 64<<10)
	node := &fakeNode{name: "n1", Frames: [][]byte{frame, frame, frame, frame, frame, frame, frame, frame, frame, frame, frame, frame, frame, frame, frame, frame}}
	startClient(b, "node-1", node, Keepalive{}, srv)
	sess := srv.session(b, "node-1")
	client := pb.NewClientRPCClient(sess.Conn())
	b.SetBytes(int64(len(frame) * len(node.Frames)))
	b.ResetTimer()
	for b.Loop() {
		stream, err := client.Logs(context.Background(), &pb.LogsRequest{AllocId: "a"})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := stream.Recv(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkUnaryDirect is the same call over a plain loopback gRPC
// connection: the baseline of BenchmarkUnaryOverTunnel.
func BenchmarkUnaryDirect(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer(rpc.ServerOptions()...)
	pb.RegisterClientRPCServer(s, &fakeNode{name: "n1"})
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	pool := rpc.NewPool()
	defer pool.Close()
	conn, err := pool.Conn(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	client := pb.NewClientRPCClient(conn)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.RestartAlloc(ctx, &pb.RestartAllocRequest{AllocId: "a"}); err != nil {
			b.Fatal(err)
		}
	}
}
