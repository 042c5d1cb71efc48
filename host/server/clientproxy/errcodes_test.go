package clientproxy

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
)

func TestClientProxySentinelCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNodeNotConnected: codes.Unavailable,
		ErrNoAllocID:        codes.InvalidArgument,
		ErrAllocNodeUnknown: codes.InvalidArgument,
		errInvalidNode:      codes.InvalidArgument,
		errServerShutdown:   codes.Unavailable,
	})
	err := fmt.Errorf("x: %w", &NotConnectedError{NodeID: "n1"})
	if !errors.Is(err, ErrNodeNotConnected) || status.Code(errcode.Status(err)) != codes.Unavailable {
		t.Fatalf("NotConnectedError: errors.Is %v, code %v", errors.Is(err, ErrNodeNotConnected), status.Code(errcode.Status(err)))
	}
}

// Moved from the server's volume sentinel test with the forwarder.
func TestCSIForwardSentinelCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		errForwardEncode: codes.Internal,
		errForwardDecode: codes.Internal,
	})
}
