package api

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrReservedParam: codes.InvalidArgument,
		ErrPageToken:     codes.Internal,
		ErrSecretsHeader: codes.InvalidArgument,
	})
}
