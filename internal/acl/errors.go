package acl

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// Kinds of policy file errors; every *hclsrc.Error of Parse wraps one.
var (
	// ErrSyntax is returned by Parse when a policy is not valid HCL (or
	// JSON).
	ErrSyntax = errcode.New(codes.InvalidArgument, "policy syntax error")
	// ErrUnknownKey is returned by Parse for a block or argument a policy
	// does not have (a resource berth does not know, a misspelt key).
	ErrUnknownKey = errcode.New(codes.InvalidArgument, "unknown policy key")
	// ErrWrongType is returned by Parse when a key holds the wrong type of
	// value.
	ErrWrongType = errcode.New(codes.InvalidArgument, "wrong type in policy")
	// ErrInvalidPolicy is returned by Parse for a value of the right type
	// that is not allowed (an unknown capability or disposition, a block
	// given twice), and by ValidName for a bad policy name.
	ErrInvalidPolicy = errcode.New(codes.InvalidArgument, "invalid policy")
)

// Token errors.
var (
	// ErrBadTokenHeader is returned by FromHeader when a request carries a
	// malformed token: an Authorization header that is not "Bearer
	// <secret>", two different tokens, or a secret that is not 64 hex
	// digits.
	ErrBadTokenHeader = errcode.New(codes.Unauthenticated, "malformed ACL token")
	// ErrTokenNotFound is returned when a presented secret matches no
	// token.
	ErrTokenNotFound = errcode.New(codes.Unauthenticated, "ACL token not found")
	// ErrTokenExpired is returned when a presented token's expiry has
	// passed.
	ErrTokenExpired = errcode.New(codes.Unauthenticated, "ACL token expired")
	// ErrPermissionDenied is returned when a token's policies do not grant
	// what a request needs; the message names the capability.
	ErrPermissionDenied = errcode.New(codes.PermissionDenied, "permission denied")
)
