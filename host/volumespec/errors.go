package volumespec

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// Kinds of volume spec errors. Every *Error wraps one of them, and *Errors
// unwraps to its entries, so errors.Is(err, ErrUnknownKey) works.
var (
	// ErrSyntax is returned by Parse when a file is not valid HCL (or JSON).
	ErrSyntax = errcode.New(codes.InvalidArgument, "syntax error")
	// ErrUnknownKey is returned by Parse for an argument or block the
	// volume specification does not have.
	ErrUnknownKey = errcode.New(codes.InvalidArgument, "unknown key")
	// ErrWrongType is returned by Parse when a key holds the wrong type of
	// value or the wrong kind of item (a block given as an argument).
	ErrWrongType = errcode.New(codes.InvalidArgument, "wrong type")
	// ErrInvalidVolume is returned by Parse and Validate when a value has
	// the right type but is not allowed: a missing plugin_id, an unknown
	// access mode, a capacity_min over capacity_max.
	ErrInvalidVolume = errcode.New(codes.InvalidArgument, "invalid volume")
)

// Pos is a position in a volume file; the zero Pos is "no position".
type Pos struct {
	File         string
	Line, Column int
}

// IsValid reports whether p names a file position.
func (p Pos) IsValid() bool { return p.File != "" && p.Line > 0 }

// String formats p as "file:line:col"; "" for the zero Pos.
func (p Pos) String() string {
	if !p.IsValid() {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is one problem with a volume: where, which field, what.
type Error struct {
	Pos Pos
	// Path names the field: "capability[1].access_mode",
	// "topology_request.required[0].segments"; empty for syntax errors.
	Path string
	Msg  string
	// Kind is one of the Err* sentinels.
	Kind error
}

// Error formats e as "file:line:col: path: msg".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.IsValid() {
		b.WriteString(e.Pos.String() + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the error's kind.
func (e *Error) Unwrap() error { return e.Kind }

// Errors is every problem found in a volume, in file order (those without a
// position last).
type Errors struct {
	// Volume is the volume's ID when it was read, for the message.
	Volume string
	Errs   []*Error
}

// Error names the volume, then lists the problems one per line.
func (es *Errors) Error() string {
	lines := make([]string, len(es.Errs))
	for i, e := range es.Errs {
		lines[i] = e.Error()
	}
	head := "volume"
	if es.Volume != "" {
		head = fmt.Sprintf("volume %q", es.Volume)
	}
	if len(lines) == 1 {
		return head + ": " + lines[0]
	}
	return head + ":\n  " + strings.Join(lines, "\n  ")
}

// Unwrap returns the entries.
func (es *Errors) Unwrap() []error {
	out := make([]error, len(es.Errs))
	for i, e := range es.Errs {
		out[i] = e
	}
	return out
}

func (es *Errors) add(pos Pos, path string, kind error, format string, args ...any) {
	es.Errs = append(es.Errs, &Error{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Kind: kind})
}

// err returns es as an error, sorted by position, or nil when empty.
func (es *Errors) err() error {
	if es == nil || len(es.Errs) == 0 {
		return nil
	}
	slices.SortStableFunc(es.Errs, func(a, b *Error) int {
		switch {
		case a.Pos.IsValid() != b.Pos.IsValid():
			if a.Pos.IsValid() {
				return -1
			}
			return 1
		case a.Pos.Line != b.Pos.Line:
			return a.Pos.Line - b.Pos.Line
		}
		return a.Pos.Column - b.Pos.Column
	})
	return es
}
