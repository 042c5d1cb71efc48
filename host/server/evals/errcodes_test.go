package evals

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrBrokerDisabled: codes.Unavailable,
		ErrEvalToken:      codes.FailedPrecondition,
	})
}
