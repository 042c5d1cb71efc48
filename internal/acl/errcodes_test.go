package acl

import (
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func TestSentinelsCarryTheirCodes(t *testing.T) {
	testutil.CheckSentinelCodes(t, map[error]codes.Code{
		ErrSyntax:           codes.InvalidArgument,
		ErrUnknownKey:       codes.InvalidArgument,
		ErrWrongType:        codes.InvalidArgument,
		ErrInvalidPolicy:    codes.InvalidArgument,
		ErrBadTokenHeader:   codes.Unauthenticated,
		ErrTokenNotFound:    codes.Unauthenticated,
		ErrTokenExpired:     codes.Unauthenticated,
		ErrPermissionDenied: codes.PermissionDenied,
	})
}
