package endpoints

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestACLSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrACLPolicyNotFound: codes.NotFound,
		ErrACLTokenNotFound:  codes.NotFound,
		ErrInvalidACLToken:   codes.InvalidArgument,
		ErrACLResetFile:      codes.FailedPrecondition,
		ErrACLDisabled:       codes.FailedPrecondition,
	})
}
