package clientproxy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
)

// The node's own answer (DeadlineExceeded included) is told from a call
// that got none: it is not retried, keeps its code and reads as the
// node's message (the tunnel's "node <id>: " dropped when the message
// names the node); an Unavailable, or any status once the call's own
// context ended, is not the node's answer, and reads without the
// "rpc error: code = … desc =" wrapper, its code kept.
func TestNodeDetachAnswered(t *testing.T) {
	const node = "n1"
	msg := `detaching volume "v" from node n1: teardown of alloc a1: still under way: context deadline exceeded`
	err := answered(context.Background(), node, status.Error(codes.DeadlineExceeded, "node n1: "+msg))
	var a *nodeAnswer
	if !errors.As(err, &a) || err.Error() != msg || errcode.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("node's DeadlineExceeded: %T %q (%s), want its answer, message %q", err, err, errcode.Code(err), msg)
	}
	err = answered(context.Background(), node, status.Error(codes.Unavailable, "node n1: tunnel session closed"))
	if errors.As(err, &a) || strings.Contains(err.Error(), "rpc error") || errcode.Code(err) != codes.Unavailable {
		t.Fatalf("Unavailable: %T %q, want not an answer, no rpc error wrapper, Unavailable", err, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = answered(ctx, node, status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	if errors.As(err, &a) || errcode.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("our own deadline: %T %q, want not the node's answer", err, err)
	}
}
