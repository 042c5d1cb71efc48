// Package sdkerr is how sdk/ declares its sentinel errors: each carries the
// gRPC code a caller should branch on and the reason that names it on the
// plugin wire, in its one declaration.
//
//	ErrTaskNotFound = sdkerr.New(codes.NotFound, "TASK_NOT_FOUND", "task not found")
//
// sdk/ imports nothing of berth outside sdk/, so it cannot use
// rpc/errcode's sentinels; this is sdk's own small copy. berth's errcode
// still classifies these errors, because it matches any error with a
// GRPCCode() codes.Code method, which Error has. The sdk's wire code (toStatus,
// fromStatus) reads the code and reason from the sentinel, and finds the
// sentinel a reason stands for with ByReason: every sentinel New made is
// registered, so none can be forgotten in a separate table.
//
// rpc/errcode's TestEverySentinelHasACode requires every exported Err…
// variable under sdk/ to be declared with New (or to alias one that is).
package sdkerr
