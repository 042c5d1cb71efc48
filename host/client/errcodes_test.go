package client

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNoServers:      codes.FailedPrecondition,
		ErrUnknownAlloc:   codes.NotFound,
		ErrNoAllocRuntime: codes.FailedPrecondition,
		ErrNoHostVolumes:  codes.FailedPrecondition,
	})
}
