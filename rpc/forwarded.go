package rpc

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// ForwardedHeader is the gRPC metadata key a server sets when it forwards a
// request to the leader; a forwarded request is never forwarded again, so a
// leader change mid-request cannot make a loop.
const ForwardedHeader = "berth-forwarded-by"

// MarkForwarded returns ctx for an outgoing call that server id forwards.
//
// The caller's ACL token, when the incoming call in ctx carries one, goes
// along (TokenKey): the server it is forwarded to checks it again.
func MarkForwarded(ctx context.Context, id string) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, ForwardedHeader, id)
	if in, ok := metadata.FromIncomingContext(ctx); ok {
		if out, _ := metadata.FromOutgoingContext(ctx); len(out.Get(TokenKey)) == 0 {
			for _, v := range in.Get(TokenKey) {
				ctx = metadata.AppendToOutgoingContext(ctx, TokenKey, v)
			}
		}
	}
	return ctx
}

// TokenKey is the gRPC metadata key an ACL token's secret travels under
// (internal/acl.MetadataKey).
const TokenKey = "x-berth-token"

// Forwarded reports whether another server forwarded the incoming call in
// ctx.
func Forwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(ForwardedHeader)) > 0
}
