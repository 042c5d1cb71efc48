package agent

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each of this package's
// sentinels reaches a gRPC or HTTP caller with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrSyntax:         codes.InvalidArgument,
		ErrUnknownKey:     codes.InvalidArgument,
		ErrWrongType:      codes.InvalidArgument,
		ErrInvalidValue:   codes.InvalidArgument,
		ErrDuplicateBlock: codes.InvalidArgument,
		ErrHostVolumePath: codes.FailedPrecondition,
		ErrTLSOff:         codes.FailedPrecondition,
	})
}
