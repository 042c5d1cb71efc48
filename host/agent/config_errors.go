package agent

import (
	"fmt"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/hclsrc"
	"berth.dev/berth/rpc/errcode"
)

// Kinds of configuration errors. Every *ConfigError wraps one of them, so
// callers can test with errors.Is through a ConfigErrors list.
var (
	// ErrSyntax is returned by ParseConfig and LoadConfigFiles when a file is
	// not valid HCL (or, for .json files, valid JSON).
	ErrSyntax = errcode.New(codes.InvalidArgument, "syntax error")
	// ErrUnknownKey is returned by ParseConfig and LoadConfigFiles when a
	// file uses an argument or block name berth does not know.
	ErrUnknownKey = errcode.New(codes.InvalidArgument, "unknown key")
	// ErrWrongType is returned by ParseConfig and LoadConfigFiles when a key
	// holds the wrong type of value or the wrong kind of item: a number where
	// a string belongs, an argument where a block belongs, a plugin block
	// without its name.
	ErrWrongType = errcode.New(codes.InvalidArgument, "wrong type")
	// ErrInvalidValue is returned by ParseConfig, LoadConfigFiles and
	// Validate when a value has the right type but is not allowed: a port out
	// of range, a malformed duration or address, settings that contradict
	// each other.
	ErrInvalidValue = errcode.New(codes.InvalidArgument, "invalid value")
	// ErrDuplicateBlock is returned by ParseConfig and LoadConfigFiles when a
	// file defines a block twice (two server blocks, two plugin blocks of the
	// same name). Across files, blocks merge instead.
	ErrDuplicateBlock = errcode.New(codes.InvalidArgument, "duplicate block")
)

// SourcePos is a position in a configuration file, formatted
// "file:line:col" like a job or volume spec's.
type SourcePos = hclsrc.Pos

// ConfigError is one problem with an agent configuration: where it is
// (Pos; zero for values that came from no file), which field it is about
// (Path, like "server.bootstrap_expect" or "server.retry_join[1]"; empty
// for problems not about one field, such as syntax errors) and what is
// wrong. Its Kind is one of the Err* kinds, and its Cause an underlying
// error such as time.ParseDuration's. It is the one error type of the HCL
// readers (hclsrc.Error), formatted "file:line:col: path: msg".
type ConfigError = hclsrc.Error

// ConfigErrors is every problem found in a configuration, in file order.
// ParseConfig, LoadConfigFiles and Validate return it (as error) when they
// find at least one problem; it reads one problem a line.
type ConfigErrors = hclsrc.Errors

// configKinds are the configuration's sentinels for the problems hclsrc
// finds.
var configKinds = hclsrc.Kinds{
	Syntax:     ErrSyntax,
	UnknownKey: ErrUnknownKey,
	WrongType:  ErrWrongType,
	Invalid:    ErrInvalidValue,
	Duplicate:  ErrDuplicateBlock,
}

// configStyle is how the configuration words its problems (see
// hclsrc.Style): a message about a key names it and the block it is in.
var configStyle = hclsrc.Style{
	NameKeys:    true,
	BlockAtType: true,
	Durations:   [4]string{"500ms", "5s", "2m", "1h"},
}

// errsOrNil returns es as an error, or nil when it is empty: a nil
// ConfigErrors stored in an error interface would not compare equal to nil.
func errsOrNil(es ConfigErrors) error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// invalidf is a value's problem of kind ErrInvalidValue, which it wraps:
// NormalizeServerAddr returns it.
func invalidf(format string, args ...any) error {
	return &hclsrc.ValueError{Class: hclsrc.Invalid, Kind: ErrInvalidValue, Msg: fmt.Sprintf(format, args...)}
}
