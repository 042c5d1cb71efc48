package volumeloops

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNoController:        codes.FailedPrecondition,
		ErrNoCapableController: codes.FailedPrecondition,
		errNodeGone:            codes.NotFound,
		errNoCSINode:           codes.FailedPrecondition,
	})
}
