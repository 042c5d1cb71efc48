package tlsconf

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrUntrustedPeer:     codes.Unauthenticated,
		ErrPeerRole:          codes.PermissionDenied,
		ErrNoPeerCertificate: codes.Unauthenticated,
		ErrOwnRole:           codes.FailedPrecondition,
	})
}
