package sdk

import (
	"errors"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk/helper"
)

var (
	// ErrListed is in the table.
	ErrListed = errors.New("listed")
	// ErrUnlisted is not.
	ErrUnlisted = errors.New("unlisted")
	// ErrListedUnknown is, with a code that classifies nothing.
	ErrListedUnknown = errors.New("listed as unknown")
)

type wireError struct {
	err    error
	code   codes.Code
	reason string
}

var wireErrors = []wireError{
	{ErrListed, codes.NotFound, "LISTED"},
	{ErrListedUnknown, codes.Unknown, "LISTED_UNKNOWN"},
	{helper.ErrHelped, codes.FailedPrecondition, "HELPED"},
	{errors.ErrUnsupported, codes.Unimplemented, "NOT_OURS"},
}
