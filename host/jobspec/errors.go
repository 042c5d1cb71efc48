package jobspec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

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

// Pos is a position in a job file. The zero Pos is "no position": jobs that
// arrive as JSON through the API carry none.
type Pos struct {
	File         string
	Line, Column int
}

// IsValid reports whether p names a file position.
func (p Pos) IsValid() bool { return p.File != "" && p.Line > 0 }

// String formats p as "file:line:col", the form compilers and editors jump
// to; "" for the zero Pos.
func (p Pos) String() string {
	if !p.IsValid() {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is one problem with a job: where it is, which field it is about and
// what is wrong.
type Error struct {
	// Pos is where the problem is; zero when the job came from no file.
	Pos Pos
	// Path names the field: the object, then the field inside it, as in
	// `group "api" task "web": resources.cpu`; a job-level field is just
	// its name (`priority`, `constraint[0].operator`). Empty for problems
	// about no one field, such as syntax errors.
	Path string
	// Msg says what is wrong, without position or path.
	Msg string
	// Kind is one of the Err* sentinels.
	Kind error
}

// Error formats e as "file:line:col: path: msg".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.IsValid() {
		b.WriteString(e.Pos.String())
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the error's kind.
func (e *Error) Unwrap() error { return e.Kind }

// Errors is every problem found in a job, in file order (problems without a
// position last, in the order the job's fields are checked). Parse,
// ValidateJob and the driver checks return it when they find at least one.
type Errors struct {
	Errs []*Error
}

// Error lists the problems one per line.
func (es *Errors) Error() string {
	lines := make([]string, len(es.Errs))
	for i, e := range es.Errs {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es *Errors) Unwrap() []error {
	out := make([]error, len(es.Errs))
	for i, e := range es.Errs {
		out[i] = e
	}
	return out
}

// err returns es as an error, or nil when it holds nothing (a nil *Errors
// in an error interface would not compare equal to nil).
func (es *Errors) err() error {
	if es == nil || len(es.Errs) == 0 {
		return nil
	}
	es.sort()
	return es
}

// sort orders the errors by position; those without one keep their order
// after the rest.
func (es *Errors) sort() {
	slices.SortStableFunc(es.Errs, func(a, b *Error) int {
		if a.Pos.IsValid() != b.Pos.IsValid() {
			if a.Pos.IsValid() {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
}

func (es *Errors) add(pos Pos, path string, kind error, format string, args ...any) {
	es.Errs = append(es.Errs, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Kind: kind})
}
