package agent

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

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

// SourcePos is a position in a configuration file.
type SourcePos struct {
	File         string
	Line, Column int
}

// IsValid reports whether p names a file position.
func (p SourcePos) IsValid() bool { return p.File != "" && p.Line > 0 }

// String formats p as "file:line,column", the form HCL tools use.
func (p SourcePos) String() string {
	if !p.IsValid() {
		return ""
	}
	return fmt.Sprintf("%s:%d,%d", p.File, p.Line, p.Column)
}

// ConfigError is one problem with an agent configuration: where it is, which
// field it is about and what is wrong.
type ConfigError struct {
	// Pos is where the problem is; zero for values that came from no file.
	Pos SourcePos
	// Path is the field path, like "server.bootstrap_expect" or
	// "server.retry_join[1]"; empty for problems not about one field,
	// such as syntax errors.
	Path string
	// Msg describes the problem, naming the field; it is Error without
	// the position.
	Msg string
	// Err is one of the Err* kinds, possibly joined with an underlying
	// cause such as a time.ParseDuration error.
	Err error
}

// Error formats e as "file:line,col: msg".
func (e *ConfigError) Error() string {
	if e.Pos.IsValid() {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Msg
}

// Unwrap returns the error's kind and cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// ConfigErrors is every problem found in a configuration, in file order.
// ParseConfig, LoadConfigFiles and Validate return it (as error) when they
// find at least one problem.
type ConfigErrors []*ConfigError

// Error lists the problems one per line.
func (es ConfigErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual errors, for errors.Is and errors.As.
func (es ConfigErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// err returns es as an error, or nil when it is empty: a nil ConfigErrors
// stored in an error interface would not compare equal to nil.
func (es ConfigErrors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

func (es *ConfigErrors) add(pos SourcePos, path string, kind error, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	*es = append(*es, &ConfigError{Pos: pos, Path: path, Msg: msg, Err: kind})
}

// addUnprefixed records a problem whose message names its subject itself.
func (es *ConfigErrors) addUnprefixed(pos SourcePos, path string, kind error, format string, args ...any) {
	*es = append(*es, &ConfigError{Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Err: kind})
}

// addValue records a problem with one value; err is a *valueError, which
// carries the kind.
func (es *ConfigErrors) addValue(pos SourcePos, path string, err error) {
	*es = append(*es, &ConfigError{Pos: pos, Path: path, Msg: path + ": " + err.Error(), Err: err})
}
