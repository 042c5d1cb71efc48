package volumespec

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/hclsrc"
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
type Pos = hclsrc.Pos

// Error is one problem with a volume: where, which field
// ("capability[1].access_mode", "topology_request.required[0].segments";
// empty for syntax errors), what.
type Error = hclsrc.Error

// Errors is every problem found in a volume, in file order (those without a
// position last).
type Errors struct {
	// Volume is the volume's ID when it was read, for the message.
	Volume string
	Errs   hclsrc.Errors
}

// Error names the volume, then lists the problems one per line.
func (es *Errors) Error() string {
	lines := es.Errs.Lines()
	head := "volume"
	if es.Volume != "" {
		head = fmt.Sprintf("volume %q", es.Volume)
	}
	if len(lines) == 1 {
		return head + ": " + lines[0]
	}
	return head + ":\n  " + strings.Join(lines, "\n  ")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es *Errors) Unwrap() []error { return es.Errs.Unwrap() }

// err returns es as an error, sorted by position, or nil when empty.
func (es *Errors) err() error {
	if len(es.Errs) == 0 {
		return nil
	}
	es.Errs.Sort()
	return es
}
