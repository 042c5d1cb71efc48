package good

import (
	"errors"

	"google.golang.org/grpc/codes"

	ec "berth.dev/berth/rpc/errcode"
)

var (
	// ErrMissing is coded, under a renamed import.
	ErrMissing = ec.New(codes.NotFound, "missing")
	// ErrGone is an alias of a coded sentinel of the same package.
	ErrGone = ErrMissing
	// errQuiet is unexported: not a sentinel the API sees.
	errQuiet = errors.New("quiet")
	// Errors is not a sentinel name.
	Errors = []error{ErrMissing}
)

// ErrFull and ErrBusy are declared together.
var ErrFull, ErrBusy = ec.New(codes.ResourceExhausted, "full"), ec.New(codes.Unavailable, "busy")
