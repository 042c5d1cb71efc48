package endpoints

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestVolumeSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrNoHealthyController:     codes.FailedPrecondition,
		ErrPluginUnknown:           codes.FailedPrecondition,
		ErrVolumeExists:            codes.AlreadyExists,
		ErrPluginCannot:            codes.FailedPrecondition,
		ErrCreateControllerChanged: codes.FailedPrecondition,
		ErrVolumeInUseOnNode:       codes.FailedPrecondition,
		ErrNoNodeCalls:             codes.Unimplemented,
		ErrNoNodeForHostVolume:     codes.FailedPrecondition,
		ErrNoHostVolumeCalls:       codes.Unimplemented,
		ErrHostVolumeNodeUp:        codes.FailedPrecondition,
	})
}
