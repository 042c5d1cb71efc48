package fsm_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
)

// TestSentinelsCarryTheirCodes pins the code each refusal of the state
// machine reaches the API with. A raft entry's bytes are built by berth's
// servers, so one that is empty, malformed or encoded from the wrong message
// is berth's bug: Internal (HTTP 500), never the caller's InvalidArgument.
func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		fsm.ErrEmptyCommand:          codes.Internal,
		fsm.ErrUnknownCommand:        codes.Unimplemented,
		fsm.ErrMalformedCommand:      codes.Internal,
		fsm.ErrMessageMismatch:       codes.Internal,
		fsm.ErrInvalidCommand:        codes.InvalidArgument,
		fsm.ErrNodeNotFound:          codes.NotFound,
		fsm.ErrNodeChanged:           codes.Aborted,
		fsm.ErrNodeSecretMismatch:    codes.PermissionDenied,
		fsm.ErrDuplicateKey:          codes.AlreadyExists,
		fsm.ErrJobNotFound:           codes.NotFound,
		fsm.ErrJobVersionNotFound:    codes.NotFound,
		fsm.ErrJobChanged:            codes.Aborted,
		fsm.ErrPlanUnseenHistory:     codes.Aborted,
		fsm.ErrEvalNotFound:          codes.NotFound,
		fsm.ErrAllocNotFound:         codes.NotFound,
		fsm.ErrAllocNodeMismatch:     codes.InvalidArgument,
		fsm.ErrNodeDraining:          codes.FailedPrecondition,
		fsm.ErrVolumeNotFound:        codes.NotFound,
		fsm.ErrVolumeInUse:           codes.FailedPrecondition,
		fsm.ErrHostVolumeNameTaken:   codes.AlreadyExists,
		fsm.ErrHostVolumeMarkChanged: codes.Aborted,
		fsm.ErrHostVolumeNotPending:  codes.Aborted,
		fsm.ErrVolumeDeleting:        codes.FailedPrecondition,
		fsm.ErrVolumeChanged:         codes.Aborted,
		fsm.ErrExternalVolumeTaken:   codes.AlreadyExists,
		fsm.ErrVolumeRegistered:      codes.AlreadyExists,
		fsm.ErrNoFreeClaim:           codes.ResourceExhausted,
		fsm.ErrMaxVolumes:            codes.ResourceExhausted,
		fsm.ErrClaimCapability:       codes.InvalidArgument,
		fsm.ErrClaimNotFound:         codes.NotFound,
		fsm.ErrClaimTransition:       codes.FailedPrecondition,
		fsm.ErrClaimNodeMismatch:     codes.InvalidArgument,
		fsm.ErrNotOperatorClaim:      codes.InvalidArgument,
		fsm.ErrAttachmentNotFound:    codes.NotFound,
		fsm.ErrAttachmentTransition:  codes.FailedPrecondition,
		fsm.ErrNodeUnavailable:       codes.FailedPrecondition,
		fsm.ErrUnknownTable:          codes.Internal,
		fsm.ErrSnapshotVersion:       codes.FailedPrecondition,
		fsm.ErrSnapshotCorrupt:       codes.DataLoss,
		fsm.ErrUnexpectedResponse:    codes.Internal,
		fsm.ErrACLBootstrapped:       codes.FailedPrecondition,
	})
}
