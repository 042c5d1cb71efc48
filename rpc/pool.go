package rpc

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk/driverpb"
)

// MaxMessageSize is the largest gRPC message berth sends or accepts, on
// both ends of every connection: servers take it from ServerOptions, the
// pool's connections from their default call options. One number for both
// ends means a server never sends what its callers refuse (gRPC's defaults
// differ: a client accepts 4 MiB, a server sends up to 2 GiB). It is the
// driver protocol's limit, so the hops to plugins carry what these do.
const MaxMessageSize = driverpb.MaxMessageSize

// ServerOptions are the message limits every berth gRPC server uses.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize)}
}

// ErrPoolClosed is returned by Pool.Conn after Close.
var ErrPoolClosed = errcode.New(codes.Unavailable, "rpc: connection pool closed")

// Pool shares one gRPC connection per remote address. Connections are lazy
// (grpc.NewClient) and reconnect by themselves, so a pooled connection to a
// restarted server recovers without being evicted.
type Pool struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
	opts   []grpc.DialOption
}

// NewPool returns an empty pool; opts are added to every connection.
// Connections accept and send messages up to MaxMessageSize.
func NewPool(opts ...grpc.DialOption) *Pool {
	return &Pool{
		conns: make(map[string]*grpc.ClientConn),
		opts: append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		}, opts...),
	}
}

// Conn returns the connection to addr (host:port), creating it on first use.
func (p *Pool) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("rpc: connecting to %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// Close closes every connection; later Conn calls fail with ErrPoolClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
}
