package helper

import (
	"errors"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/internal/sdkerr"
)

// ErrHelped is a subpackage sentinel declared with sdk's constructor.
var ErrHelped = sdkerr.New(codes.FailedPrecondition, "HELPED", "helped")

// ErrForgotten is a subpackage sentinel declared without it.
var ErrForgotten = errors.New("forgotten")

// ErrHelpedAgain takes ErrHelped's reason, in another package.
var ErrHelpedAgain = sdkerr.New(codes.Internal, "HELPED", "helped again")
