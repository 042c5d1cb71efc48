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

// testNodeSecrets are the node secrets the servers of this package's tests
// issued, by node ID, so the tests' pools (testNodePool) act as the nodes
// they name, as a real client does with its stored secret. This package's
// tests run one at a time; a new cluster's registration replaces an
// earlier test's secret of the same node ID.
var testNodeSecrets sync.Map

func testNodeSecret(nodeID string) string {
	if v, ok := testNodeSecrets.Load(nodeID); ok {
		return v.(string)
	}
	return ""
}

// testNodePool is rpc.NewPool whose calls carry the secret of the node
// they name (a request's node_id, a tunnel's node ID header) and learn
// the secrets registrations issue.
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
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*pb.NodeRegisterResponse); ok && err == nil && r.GetNodeSecret() != "" {
			testNodeSecrets.Store(nodeID, r.GetNodeSecret())
		}
		return err
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
