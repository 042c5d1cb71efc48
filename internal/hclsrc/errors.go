package hclsrc

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a file. The zero Pos is "no position": a spec that
// arrives as JSON through the API, or a value set by a flag, carries none.
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

// Error is one problem with a file (a job, a volume, an agent
// configuration): where it is, which field it is about and what is wrong.
// Every reader built on this package reports its problems as *Error.
type Error struct {
	// Pos is where the problem is; zero when the value came from no file.
	Pos Pos
	// Path names the field: the object, then the field inside it, as in
	// `group "api" task "web": resources.cpu`, `capability[1].access_mode`
	// or `server.retry_join[1]`. Empty for problems about no one field,
	// such as syntax errors.
	Path string
	// Msg says what is wrong, without position or path.
	Msg string
	// Named says that Msg names its field itself (`unknown key "x" in
	// server block`), so Error leaves Path out.
	Named bool
	// Kind is one of the reader's sentinel errors (each with a gRPC code),
	// so errors.Is works on the entries.
	Kind error
	// Cause is the underlying error, when there is one (what
	// time.ParseDuration said); nil otherwise.
	Cause error
}

// Error formats e as "file:line:col: path: msg", leaving out what e lacks.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.IsValid() {
		b.WriteString(e.Pos.String())
		b.WriteString(": ")
	}
	if e.Path != "" && !e.Named {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the error's kind and, when there is one, its cause.
func (e *Error) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// Errors collects every problem a parse or a validation finds, so they are
// reported all at once. As an error it reads one problem a line; the spec
// packages wrap it in types of their own that say more (the volume's ID).
type Errors []*Error

// Add records one problem whose message does not name its field.
func (es *Errors) Add(pos Pos, path string, kind error, format string, args ...any) {
	*es = append(*es, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Kind: kind})
}

// AddNamed records one problem whose message names its field itself.
func (es *Errors) AddNamed(pos Pos, path string, kind error, format string, args ...any) {
	*es = append(*es, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Kind: kind, Named: true})
}

// AddValue records err, a problem with one value, as kinds classes it (see
// Kinds.Of); its text is the message.
func (es *Errors) AddValue(pos Pos, path string, kinds Kinds, err error) {
	var cause error
	if ve, ok := errors.AsType[*ValueError](err); ok {
		cause = ve.Cause
	}
	*es = append(*es, &Error{Pos: pos, Path: path, Msg: err.Error(), Kind: kinds.Of(err), Cause: cause})
}

// Sort orders the problems by position; those without one keep their
// order (the order the fields are checked in) after the rest.
func (es Errors) Sort() {
	slices.SortStableFunc(es, func(a, b *Error) int {
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
func (es Errors) Lines() []string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return lines
}

// Error lists the problems one per line.
func (es Errors) Error() string { return strings.Join(es.Lines(), "\n") }

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Kinds are a reader's sentinel errors, one for each class of problem the
// kit finds. Each reader has its own (jobspec.ErrUnknownKey,
// agent.ErrUnknownKey), so errors.Is tells them apart.
type Kinds struct {
	// Syntax is for a file that is not HCL (or, for .json files, JSON).
	Syntax error
	// UnknownKey is for an argument or block the schema lacks.
	UnknownKey error
	// WrongType is for a value of the wrong type, or an argument where a
	// block belongs and the reverse.
	WrongType error
	// Invalid is for a value of the right type that is not allowed, or
	// cannot be evaluated.
	Invalid error
	// Duplicate is for a block given twice where one is allowed.
	Duplicate error
}

// Of is the sentinel for err: the Kind of a *ValueError in its chain, or
// WrongType or Invalid as its Class says; Invalid for any other error.
func (k Kinds) Of(err error) error {
	ve, ok := errors.AsType[*ValueError](err)
	switch {
	case ok && ve.Kind != nil:
		return ve.Kind
	case ok && ve.Class == WrongType:
		return k.WrongType
	}
	return k.Invalid
}

// Class is what is wrong with a value, which Kinds turns into a reader's
// sentinel.
type Class int

const (
	// Invalid is a value of the right type that is not allowed.
	Invalid Class = iota
	// WrongType is a value of the wrong type.
	WrongType
)

// ValueError is a problem with one value, as the conversions (Style.String,
// Style.Duration...) and a reader's own checks return it.
type ValueError struct {
	Class Class
	// Kind, when set, is the reader's sentinel itself, for the errors of a
	// reader's exported checks, which must wrap it (agent.NormalizeServerAddr
	// and agent.ErrInvalidValue); Kinds.Of returns it.
	Kind error
	Msg  string
	// Cause is the underlying error, if any.
	Cause error
}

// Error returns the message.
func (e *ValueError) Error() string { return e.Msg }

// Unwrap returns the kind and the cause, those that are set.
func (e *ValueError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Kind, e.Cause} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Invalidf returns a ValueError of class Invalid.
func Invalidf(format string, args ...any) error {
	return &ValueError{Class: Invalid, Msg: fmt.Sprintf(format, args...)}
}
