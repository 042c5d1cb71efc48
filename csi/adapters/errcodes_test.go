package adapters

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrUnknownAdapter:       codes.NotFound,
		ErrAdapterMissing:       codes.NotFound,
		ErrAdapterNotExecutable: codes.FailedPrecondition,
		ErrInvalidConfig:        codes.InvalidArgument,
		ErrAdapterStart:         codes.Unavailable,
		ErrAdapterName:          codes.FailedPrecondition,
		ErrAdapterExited:        codes.Unavailable,
		ErrAdapterUnavailable:   codes.Unavailable,
		ErrAdapterFailed:        codes.FailedPrecondition,
		ErrShutdown:             codes.Unavailable,
		ErrNestedPlugin:         codes.FailedPrecondition,
	})
}
