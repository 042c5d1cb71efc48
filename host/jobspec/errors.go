package jobspec

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/errcode"
)

// Kinds of job spec errors. Every *Error wraps one of them, and *Errors
// unwraps to its entries, so errors.Is(err, ErrUnknownKey) works on what
// Parse returns; all are InvalidArgument, so the API answers 400.
var (
	// ErrSyntax is returned by Parse when a file is not valid HCL (or, for
	// .json files, valid JSON).
	ErrSyntax = errcode.New(codes.InvalidArgument, "syntax error")
	// ErrUnknownKey is returned by Parse when a file uses an argument or
	// block name a job spec does not have, and by Validate and
	// ValidateDrivers for a driver config key the driver's schema lacks.
	ErrUnknownKey = errcode.New(codes.InvalidArgument, "unknown key")
	// ErrWrongType is returned by Parse and the Validate functions when a
	// key holds the wrong type of value or the wrong kind of item: a number
	// where a string belongs, an argument where a block belongs.
	ErrWrongType = errcode.New(codes.InvalidArgument, "wrong type")
	// ErrInvalidJob is returned by Parse, ValidateJob and the driver checks
	// when a value has the right type but is not allowed: a negative count,
	// an unknown operator, a missing task, a duplicate name, a regexp that
	// does not compile, a required driver config key left out.
	ErrInvalidJob = errcode.New(codes.InvalidArgument, "invalid job")
	// ErrUnknownDriver is returned by Validate and ValidateDrivers when a
	// task names a driver no node of the cluster (or, without a cluster, no
	// built-in driver) offers.
	ErrUnknownDriver = errcode.New(codes.InvalidArgument, "unknown driver")
)

// Pos is a position in a job file; the zero Pos is "no position" (jobs
// that arrive as JSON through the API carry none).
type Pos = hclsrc.Pos

// Error is one problem with a job: where it is, which field it is about
// (`group "api" task "web": resources.cpu`) and what is wrong.
type Error = hclsrc.Error

// Errors is every problem found in a job, in file order (problems without a
// position last, in the order the job's fields are checked). Parse,
// ValidateJob and the driver checks return it when they find at least one.
type Errors struct {
	Errs hclsrc.Errors
}

// Error lists the problems one per line.
func (es *Errors) Error() string { return es.Errs.Error() }

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es *Errors) Unwrap() []error { return es.Errs.Unwrap() }

// err returns es as an error, or nil when it holds nothing (a nil *Errors
// in an error interface would not compare equal to nil).
func (es *Errors) err() error {
	if len(es.Errs) == 0 {
		return nil
	}
	es.Errs.Sort()
	return es
}

// errorsOf returns es as an error (see err).
func errorsOf(es hclsrc.Errors) error { return (&Errors{Errs: es}).err() }

func (es *Errors) add(pos Pos, path string, kind error, format string, args ...any) {
	es.Errs.Add(pos, path, kind, format, args...)
}

// kinds are the job spec's sentinels for the problems hclsrc finds.
var kinds = hclsrc.Kinds{
	Syntax:     ErrSyntax,
	UnknownKey: ErrUnknownKey,
	WrongType:  ErrWrongType,
	Invalid:    ErrInvalidJob,
	Duplicate:  ErrInvalidJob,
}
