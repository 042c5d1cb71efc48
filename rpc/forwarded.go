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
func MarkForwarded(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, ForwardedHeader, id)
}

// Forwarded reports whether another server forwarded the incoming call in
// ctx.
func Forwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(ForwardedHeader)) > 0
}
