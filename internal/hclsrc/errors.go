package hclsrc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a spec file. The zero Pos is "no position": a spec
// that arrives as JSON through the API carries none.
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

// Error is one problem with a spec (a job, a volume): where it is, which
// field it is about and what is wrong. The job and volume spec packages
// share it, each with its own kinds.
type Error struct {
	// Pos is where the problem is; zero when the spec came from no file.
	Pos Pos
	// Path names the field: the object, then the field inside it, as in
	// `group "api" task "web": resources.cpu` or `capability[1].access_mode`.
	// Empty for problems about no one field, such as syntax errors.
	Path string
	// Msg says what is wrong, without position or path.
	Msg string
	// Kind is one of the spec package's Err* sentinels (each with a gRPC
	// code), so errors.Is works on the entries.
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

// ErrorList collects every problem a parse or a validation finds, so they
// are reported all at once. The spec packages embed it in their Errors
// types, which say how the list reads as one error.
type ErrorList struct {
	Errs []*Error
}

// Add records one problem.
func (l *ErrorList) Add(pos Pos, path string, kind error, format string, args ...any) {
	l.Errs = append(l.Errs, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Kind: kind})
}

// Empty reports whether nothing was recorded.
func (l *ErrorList) Empty() bool { return l == nil || len(l.Errs) == 0 }

// Sort orders the problems by position; those without one keep their
// order (the order the fields are checked in) after the rest.
func (l *ErrorList) Sort() {
	slices.SortStableFunc(l.Errs, func(a, b *Error) int {
		if a.Pos.IsValid() != b.Pos.IsValid() {
			if a.Pos.IsValid() {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
}

// Lines returns each problem formatted, in the list's order.
func (l *ErrorList) Lines() []string {
	lines := make([]string, len(l.Errs))
	for i, e := range l.Errs {
		lines[i] = e.Error()
	}
	return lines
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (l *ErrorList) Unwrap() []error {
	out := make([]error, len(l.Errs))
	for i, e := range l.Errs {
		out[i] = e
	}
	return out
}
