package rpc

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"
)

// TestMarkForwardedCarriesTheToken: a forwarded call carries the caller's
// ACL token once, so the server it reaches checks it again.
func TestMarkForwardedCarriesTheToken(t *testing.T) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(TokenKey, "secret"))
	out, _ := metadata.FromOutgoingContext(MarkForwarded(MarkForwarded(in, "s1"), "s1"))
	if got := out.Get(TokenKey); !slices.Equal(got, []string{"secret"}) {
		t.Errorf("forwarded token %v, want it once", got)
	}
	if got := out.Get(ForwardedHeader); len(got) == 0 {
		t.Error("not marked forwarded")
	}
	out, _ = metadata.FromOutgoingContext(MarkForwarded(context.Background(), "s1"))
	if got := out.Get(TokenKey); len(got) != 0 {
		t.Errorf("a call without a token forwarded %v", got)
	}
}
