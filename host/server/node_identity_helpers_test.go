package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// testNodeSecrets are the node secrets of this package's tests' nodes, by
// node ID, made at a node's first call as a real client makes its own
// before registering, so the tests' pools (testNodePool) act as the
// nodes they name. Each test's cluster is new, so a node ID's secret is
// admitted again by its first registration there.
var testNodeSecrets sync.Map

func testNodeSecret(nodeID string) string {
	if v, ok := testNodeSecrets.Load(nodeID); ok {
		return v.(string)
	}
	secret, err := rpc.NewNodeSecret()
	if err != nil {
		panic(err)
	}
	v, _ := testNodeSecrets.LoadOrStore(nodeID, secret)
	return v.(string)
}

// testNodePool is rpc.NewPool whose calls carry the secret of the node
// they name (a request's node_id, a tunnel's node ID header).
func testNodePool() *rpc.Pool {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var nodeID string
		switch r := req.(type) {
		case *pb.NodeRegisterRequest:
			nodeID = r.GetNode().GetId()
		case nodeRequest:
			nodeID = r.GetNodeId()
		}
		if nodeID != "" && !hasSecret(ctx) {
			ctx = rpc.WithNodeSecret(ctx, testNodeSecret(nodeID))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		if v := md.Get(tunnel.NodeIDHeader); len(v) > 0 && !hasSecret(ctx) {
			ctx = rpc.WithNodeSecret(ctx, testNodeSecret(v[0]))
		}
		return streamer(ctx, desc, cc, method, opts...)
	}
	return rpc.NewPool(grpc.WithChainUnaryInterceptor(unary), grpc.WithChainStreamInterceptor(stream))
}

// hasSecret reports whether the outgoing ctx already carries a node
// secret (a test presenting one of its choosing).
func hasSecret(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	return len(md.Get(rpc.NodeSecretHeader)) > 0
}
