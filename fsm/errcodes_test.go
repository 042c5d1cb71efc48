package fsm_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each refusal of the state
// machine reaches the API with.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		fsm.ErrEmptyCommand:       codes.InvalidArgument,
		fsm.ErrUnknownCommand:     codes.Unimplemented,
		fsm.ErrMalformedCommand:   codes.InvalidArgument,
		fsm.ErrMessageMismatch:    codes.InvalidArgument,
		fsm.ErrInvalidCommand:     codes.InvalidArgument,
		fsm.ErrNodeNotFound:       codes.NotFound,
		fsm.ErrDuplicateKey:       codes.AlreadyExists,
		fsm.ErrUnknownTable:       codes.Internal,
		fsm.ErrSnapshotVersion:    codes.FailedPrecondition,
		fsm.ErrSnapshotCorrupt:    codes.DataLoss,
		fsm.ErrUnexpectedResponse: codes.Internal,
	})
}
