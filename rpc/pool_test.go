package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/pb"
)

func TestPoolSharesConnectionsAndCloses(t *testing.T) {
	p := NewPool()
	a1, err := p.Conn("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := p.Conn("127.0.0.1:1")
	b, _ := p.Conn("127.0.0.1:2")
	if a1 != a2 {
		t.Fatal("two connections to one address")
	}
	if a1 == b {
		t.Fatal("one connection for two addresses")
	}
	p.Close()
	if _, err := p.Conn("127.0.0.1:1"); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("Conn after Close: %v, want ErrPoolClosed", err)
	}
}

// bigStatus answers Ping with a reply of a requested size and reports the
// size of the request it received.
type bigStatus struct {
	pb.UnimplementedStatusServer
	replyBytes int
}

func (b *bigStatus) Ping(_ context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	return &pb.PingResponse{
		Server: &pb.ServerMember{Name: strings.Repeat("r", b.replyBytes), Id: fmt.Sprint(len(req.GetFrom().GetName()))},
	}, nil
}

// A pooled connection accepts every message a berth server may send, and
// may send what a server accepts: the two ends share MaxMessageSize. (With
// gRPC's defaults a client refused replies over 4 MiB that servers sent.)
func TestPoolAndServersShareMessageLimits(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := &bigStatus{}
	srv := grpc.NewServer(ServerOptions()...)
	pb.RegisterStatusServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	p := NewPool()
	t.Cleanup(p.Close)
	conn, err := p.Conn(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client := pb.NewStatusClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Well over gRPC's 4 MiB default, both ways.
	const big = 8 << 20
	svc.replyBytes = big
	resp, err := client.Ping(ctx, &pb.PingRequest{From: &pb.ServerMember{Name: strings.Repeat("q", big)}})
	if err != nil {
		t.Fatalf("8 MiB request and reply through the pool: %v", err)
	}
	if len(resp.GetServer().GetName()) != big || resp.GetServer().GetId() != fmt.Sprint(big) {
		t.Fatalf("reply of %d bytes, server saw a request of %s; want %d both", len(resp.GetServer().GetName()), resp.GetServer().GetId(), big)
	}

	// Past the limit the server refuses to send; the caller is told why
	// with ResourceExhausted rather than a reply it cannot read.
	svc.replyBytes = MaxMessageSize + 1
	_, err = client.Ping(ctx, &pb.PingRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("reply over MaxMessageSize: %v, want ResourceExhausted", err)
	}
}
