package client

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestCSISentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNoCSIPlugins: codes.FailedPrecondition,
		ErrBadCSICall:   codes.InvalidArgument,
	})
}
