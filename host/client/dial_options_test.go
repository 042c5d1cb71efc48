package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// Config.DialOptions reach the client's connections, after its own: an
// interceptor sees the registration and the heartbeats, with the node
// secret already in the call's metadata.
func TestDialOptionsReachTheServerConnections(t *testing.T) {
	s := startServer(t)
	var mu sync.Mutex
	calls := map[string]int{}
	secrets := map[string]bool{}
	intercept := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		mu.Lock()
		calls[method]++
		secrets[method] = len(md.Get(rpc.NodeSecretHeader)) == 1 && md.Get(rpc.NodeSecretHeader)[0] != ""
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c, err := New(Config{
		DataDir:     t.TempDir(),
		Servers:     []string{serverRPC(t, s)},
		Logger:      testutil.Logger(t),
		DialOptions: []grpc.DialOption{intercept},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	testutil.WaitFor(t, 15*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls[pb.Nodes_Register_FullMethodName] == 0 {
			return fmt.Errorf("the interceptor saw no registration: %v", calls)
		}
		if !secrets[pb.Nodes_Register_FullMethodName] {
			return fmt.Errorf("the registration the interceptor saw carried no node secret")
		}
		return nil
	})
}
