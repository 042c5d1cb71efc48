package taskdrivers

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrUnknownDriver:       codes.NotFound,
		ErrPluginMissing:       codes.NotFound,
		ErrPluginNotExecutable: codes.FailedPrecondition,
		ErrPluginStart:         codes.Unavailable,
		ErrPluginName:          codes.FailedPrecondition,
		ErrPluginExited:        codes.Unavailable,
		ErrDriverUnavailable:   codes.Unavailable,
		ErrDriverFailed:        codes.FailedPrecondition,
		ErrMountsNotSupported:  codes.FailedPrecondition,
		ErrShutdown:            codes.Unavailable,
		ErrNestedPlugin:        codes.FailedPrecondition,
	})
}
