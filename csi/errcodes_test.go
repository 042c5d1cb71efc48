package csi_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		csi.ErrPluginShutdown:            codes.Unavailable,
		csi.ErrInvalidResponse:           codes.Internal,
		csi.ErrConfirmationMismatch:      codes.FailedPrecondition,
		csi.ErrInvalidRequest:            codes.InvalidArgument,
		csi.ErrInvalidEndpoint:           codes.InvalidArgument,
		csi.ErrNotForwardable:            codes.PermissionDenied,
		csi.ErrControllerInstanceChanged: codes.FailedPrecondition,
	})
}
