package bad

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/good"
	"berth.dev/berth/rpc/errcode"
)

// ErrPlain has no code.
var ErrPlain = errors.New("plain")

var (
	// ErrUnknown is coded with a code that classifies nothing.
	ErrUnknown = errcode.New(codes.Unknown, "unknown")
	// ErrOK likewise.
	ErrOK = errcode.New(codes.OK, "ok")
	// ErrIndirect's code is not a constant the walker can read.
	ErrIndirect = errcode.New(someCode, "indirect")
	// ErrWrapped wraps a coded sentinel but is a new value with no code.
	ErrWrapped = fmt.Errorf("wrapped: %w", good.ErrMissing)
	// ErrAliasOfPlain aliases an uncoded sentinel.
	ErrAliasOfPlain = ErrPlain
	// ErrAliasOfGood aliases a coded sentinel in another package: fine.
	ErrAliasOfGood = good.ErrGone
	// ErrForeign aliases something that is no berth sentinel.
	ErrForeign = fmt.ErrUnsupported
	// ErrNone has no initializer.
	ErrNone error
)

var someCode = codes.NotFound
