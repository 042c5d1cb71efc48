package pluginmanager

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrInvalidConfig:       codes.InvalidArgument,
		ErrNoController:        codes.NotFound,
		ErrControllerUnhealthy: codes.FailedPrecondition,
		ErrNoNode:              codes.NotFound,
		ErrNodeUnhealthy:       codes.FailedPrecondition,
	})
}
