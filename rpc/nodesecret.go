package rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// NodeSecretHeader is the gRPC metadata key of the node secret a client
// sends with every call it makes to the servers. Metadata, not a request
// field: every node call carries it the same way (the Tunnel stream has no
// request message to carry it), no request message changes, and a server
// forwarding a call to the leader passes it on with ForwardNodeSecret.
const NodeSecretHeader = "berth-node-secret"

// NodeSecret returns the node secret of the incoming call in ctx, "" when
// it carries none.
func NodeSecret(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(NodeSecretHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

// WithNodeSecret returns ctx for an outgoing call carrying secret.
func WithNodeSecret(ctx context.Context, secret string) context.Context {
	if secret == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, NodeSecretHeader, secret)
}

// ForwardNodeSecret returns ctx for an outgoing call that forwards the
// incoming call in ctx, carrying its node secret.
func ForwardNodeSecret(ctx context.Context) context.Context {
	return WithNodeSecret(ctx, NodeSecret(ctx))
}

// NodeSecretDialOptions makes every call on a connection carry the secret
// secret returns at the time of the call ("" sends none).
func NodeSecretDialOptions(secret func() string) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(WithNodeSecret(ctx, secret()), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(WithNodeSecret(ctx, secret()), desc, cc, method, opts...)
		}),
	}
}

// NodeSecretBytes is a node secret's entropy: 256 bits.
const NodeSecretBytes = 32

// NewNodeSecret returns a fresh node secret: 256 bits from crypto/rand, as
// 64 lowercase hex digits.
func NewNodeSecret() (string, error) {
	b := make([]byte, NodeSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a node secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// WellFormedNodeSecret reports whether s has a node secret's form: 64
// lowercase hex digits.
func WellFormedNodeSecret(s string) bool {
	if len(s) != 2*NodeSecretBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
