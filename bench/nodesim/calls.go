package main

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// callCounter counts the calls every simulated node makes to the servers,
// by method, through a client interceptor on the nodes' connections
// (client.Config.DialOptions): heartbeats per second are what the leader
// is asked to handle.
type callCounter struct {
	mu     sync.Mutex
	counts map[string]*atomic.Int64
	// slowest is the longest heartbeat call (nanoseconds), failed the
	// heartbeats that got no answer.
	slowest, failed atomic.Int64
	// logger, when set, is told of every heartbeat slower than
	// slowHeartbeat.
	logger hclog.Logger
}

// slowHeartbeat is a heartbeat call worth logging: a fifth of the
// shortest TTL.
const slowHeartbeat = 2 * time.Second

func newCallCounter(logger hclog.Logger) *callCounter {
	return &callCounter{counts: map[string]*atomic.Int64{}, logger: logger}
}

func (c *callCounter) counter(method string) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.counts[method]
	if n == nil {
		n = new(atomic.Int64)
		c.counts[method] = n
	}
	return n
}

// dialOptions count every unary call and every stream opened.
func (c *callCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			c.counter(method).Add(1)
			countAllocUpdates(c, req)
			if method != pb.Nodes_Heartbeat_FullMethodName {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			start := time.Now()
			err := invoker(ctx, method, req, reply, cc, opts...)
			d := int64(time.Since(start))
			for {
				cur := c.slowest.Load()
				if d <= cur || c.slowest.CompareAndSwap(cur, d) {
					break
				}
			}
			if err != nil {
				c.failed.Add(1)
			}
			if time.Duration(d) > slowHeartbeat && c.logger != nil {
				c.logger.Warn("slow heartbeat", "node_id", req.(*pb.NodeHeartbeatRequest).GetNodeId(), "started", start.Format(time.RFC3339Nano),
					"took", time.Duration(d), "error", err)
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			c.counter(method).Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// snapshot returns every method's count so far.
func (c *callCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.counts))
	for m, n := range c.counts {
		out[m] = n.Load()
	}
	return out
}

// rates returns the calls per second by method between two snapshots,
// the method named by its last path element (Service/Method).
func rates(before, after map[string]int64, seconds float64) map[string]float64 {
	out := map[string]float64{}
	for m, n := range after {
		if strings.HasPrefix(m, allocUpdatesKey) {
			continue
		}
		if d := n - before[m]; d > 0 && seconds > 0 {
			out[strings.TrimPrefix(m, "/berth.v1.")] = float64(d) / seconds
		}
	}
	return out
}
