package sdk

import (
	"errors"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/sdk/helper"
	"berth.dev/berth/sdk/internal/sdkerr"
)

var (
	// ErrDeclared is declared with sdk's constructor.
	ErrDeclared = sdkerr.New(codes.NotFound, "DECLARED", "declared")
	// ErrTabled has a row in a table, which codes nothing at run time.
	ErrTabled = errors.New("tabled")
	// ErrUnknownCode classifies nothing.
	ErrUnknownCode = sdkerr.New(codes.Unknown, "UNKNOWN_CODE", "unknown code")
	// ErrNoReason has an empty wire reason.
	ErrNoReason = sdkerr.New(codes.NotFound, "", "no reason")
	// ErrReasonTaken reuses ErrDeclared's reason.
	ErrReasonTaken = sdkerr.New(codes.NotFound, "DECLARED", "reason taken")
	// ErrReasonVar has a reason the check cannot read.
	ErrReasonVar = sdkerr.New(codes.NotFound, reasonVar, "reason var")
	// ErrShort leaves out the reason.
	ErrShort = sdkerr.New(codes.NotFound, "short")
	// ErrBerths uses berth's constructor, which sdk/ may not import.
	ErrBerths = errcode.New(codes.NotFound, "berth's")
	// ErrAliasOfHelper aliases a subpackage's coded sentinel.
	ErrAliasOfHelper = helper.ErrHelped
)

const reasonVar = "REASON_VAR"

// wireErrors is a table of the kind sdk once had: a row here does not give
// ErrTabled a code errcode can see, so the check ignores it.
var wireErrors = []struct {
	err  error
	code codes.Code
}{
	{ErrTabled, codes.NotFound},
}
