package errcode

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel is a package sentinel error that carries its gRPC code. Compare
// with errors.Is, as with any sentinel; the value is a pointer, so two
// sentinels with the same text are still different errors.
type Sentinel struct {
	code codes.Code
	msg  string
}

// New returns a sentinel whose Error is msg and whose code is code. It
// panics when code is OK or Unknown, or not a gRPC code: a sentinel exists
// to be classified, and the panic fires when the declaring package is
// initialised, so no test run can miss it.
func New(code codes.Code, msg string) error {
	if code == codes.OK || code == codes.Unknown || int(code) >= len(names) {
		panic("errcode.New(" + code.String() + ", " + msg + "): a sentinel needs a code other than OK and Unknown")
	}
	return &Sentinel{code: code, msg: msg}
}

// Error returns the sentinel's message.
func (s *Sentinel) Error() string { return s.msg }

// GRPCCode returns the code callers of the API see for this refusal.
func (s *Sentinel) GRPCCode() codes.Code { return s.code }

// GRPCStatus lets grpc-go and status.FromError find the code of a sentinel
// wrapped anywhere in an error, e.g. in a streaming handler, which the
// server's unary error interceptor does not see.
func (s *Sentinel) GRPCStatus() *status.Status { return status.New(s.code, s.msg) }

// coder is implemented by every error that carries a code of its own.
type coder interface{ GRPCCode() codes.Code }

// statuser is implemented by gRPC status errors and by errors that travel
// as one (csi.Error).
type statuser interface{ GRPCStatus() *status.Status }

// foreign lists the sentinels of other libraries that reach berth's API,
// with the code each stands for. They are matched by identity (errors.Is on
// the one error in the chain), never by message. The context errors are
// here; the package that wraps another library registers that library's
// (the server core registers raft's) with RegisterForeign, so this package
// imports none of them.
var foreign = []foreignCode{
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

type foreignCode struct {
	err  error
	code codes.Code
}

// RegisterForeign records that err, a sentinel of another library that
// reaches berth's API, stands for code: Code and Status then classify it
// (matched by identity, as errors.Is, never by message). It is for a
// package's init, the one time nothing reads the table; it panics when
// code is OK or Unknown, as New does.
func RegisterForeign(err error, code codes.Code) {
	if err == nil || code == codes.OK || code == codes.Unknown || int(code) >= len(names) {
		panic("errcode.RegisterForeign(" + code.String() + "): a foreign sentinel needs an error and a code other than OK and Unknown")
	}
	foreign = append(foreign, foreignCode{err, code})
}

// Code returns the gRPC code of err: OK for nil; otherwise the code of the
// error nearest the top of err's chain (in errors.As order) that has one — a
// gRPC status, a Sentinel or other error with a GRPCCode method (sdk's
// sentinels, sdk.RPCError) that does not answer Unknown, a context error or
// one of the foreign sentinels (see RegisterForeign). An error with none
// of these is Unknown: nobody classified it, which is not the same as a bug
// of berth's (Internal). See the package doc for why the nearest wins, and
// Fallback for a wrapper that must not hide its cause's code.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	code, _ := find(err)
	return code
}

// Status returns the gRPC status error for err, nil for nil. A status error
// is returned as it is. Otherwise the code is Code(err) and the message is
// err.Error(), the whole wrapped text, so it still names the node, volume or
// server the refusal is about; details of a wrapped status (the sdk's
// ErrorInfo, say) are kept.
func Status(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(statuser); ok {
		if st, ok := status.FromError(err); ok {
			return st.Err()
		}
	}
	code, st := find(err)
	if st == nil {
		return status.Error(code, err.Error())
	}
	p := st.Proto()
	p.Message = err.Error()
	return status.FromProto(p).Err()
}

// find walks err's tree depth first, as errors.As does, and returns the
// first code it meets, with the status it came from when that was a gRPC
// status (so its details can be kept).
func find(err error) (codes.Code, *status.Status) {
	switch e := err.(type) {
	case nil:
		return codes.Unknown, nil
	case coder:
		// An error whose code is Unknown (an sdk.RPCError for a driver's
		// unclassified error) classifies nothing: look further down.
		if c := e.GRPCCode(); c != codes.Unknown && c != codes.OK {
			return c, nil
		}
	case statuser:
		if st := e.GRPCStatus(); st != nil {
			return st.Code(), st
		}
	}
	for _, f := range foreign {
		if err == f.err {
			return f.code, nil
		}
		if is, ok := err.(interface{ Is(error) bool }); ok && is.Is(f.err) {
			return f.code, nil
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return find(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, inner := range u.Unwrap() {
			if code, st := find(inner); code != codes.Unknown {
				return code, st
			}
		}
	}
	return codes.Unknown, nil
}

// Fallback returns an error that reads "sentinel: cause" and that errors.Is
// both, whose code is cause's when cause has one and sentinel's otherwise.
// It is for a sentinel that names the step that failed but not whether
// retrying helps ("plugin failed to start"): under the nearest-code
// rule, fmt.Errorf("%w: %w", sentinel, cause) would hide the cause's code
// (an incompatible plugin API, FailedPrecondition, answered as the
// sentinel's Unavailable). A wrapper that means to reclassify its cause
// wraps it with fmt.Errorf as usual.
//
// A cause whose code is Canceled or DeadlineExceeded does not win: a step
// that ran out of its own time (a plugin's launch timeout) says nothing
// about the caller's deadline, which is what those codes tell a caller, and
// the sentinel's code (Unavailable: try again) is the truer answer.
func Fallback(sentinel, cause error) error {
	return &fallback{sentinel: sentinel, cause: cause}
}

type fallback struct{ sentinel, cause error }

func (f *fallback) Error() string { return f.sentinel.Error() + ": " + f.cause.Error() }

// Unwrap puts the cause first, so Code (and errors.As) meet its code
// before the sentinel's.
func (f *fallback) Unwrap() []error { return []error{f.cause, f.sentinel} }

// GRPCStatus gives grpc-go's own conversions (status.FromError) the same
// code as Code: their errors.As would otherwise skip a cause that has only
// a GRPCCode method and find the sentinel's status. A cause's status keeps
// its details.
func (f *fallback) GRPCStatus() *status.Status {
	code, st := find(f.cause)
	switch code {
	case codes.Unknown, codes.Canceled, codes.DeadlineExceeded:
		code, st = find(f.sentinel)
	}
	if st == nil {
		return status.New(code, f.Error())
	}
	p := st.Proto()
	p.Message = f.Error()
	return status.FromProto(p)
}
