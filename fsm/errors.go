package fsm

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

var (
	// ErrEmptyCommand is returned by Decode, and in an ApplyResult, when a raft
	// log entry carries no bytes at all, so not even a command type.
	ErrEmptyCommand = errcode.New(codes.InvalidArgument, "empty command: no command type byte")

	// ErrUnknownCommand is returned by Encode, Decode and (in an ApplyResult)
	// Apply when the command type byte names no command this version knows and
	// the type is not flagged ignorable. A server applying such an entry is
	// older than the server that proposed it and must be upgraded.
	ErrUnknownCommand = errcode.New(codes.Unimplemented, "unknown command type")

	// ErrMalformedCommand is returned by Decode, and in an ApplyResult, when the
	// command type is known but the bytes after it are not a valid encoding of
	// that command's message.
	ErrMalformedCommand = errcode.New(codes.InvalidArgument, "malformed command body")

	// ErrMessageMismatch is returned by Encode when the message given is not
	// the message type the command type carries.
	ErrMessageMismatch = errcode.New(codes.InvalidArgument, "message does not match command type")

	// ErrInvalidCommand is returned in an ApplyResult when a command decodes
	// but its content cannot be applied: a missing ID or an unusable status.
	// The state is left unchanged.
	ErrInvalidCommand = errcode.New(codes.InvalidArgument, "invalid command")

	// ErrNodeNotFound is returned in an ApplyResult when a command names a
	// node that is not registered.
	ErrNodeNotFound = errcode.New(codes.NotFound, "node not found")

	// ErrDuplicateKey is returned in an ApplyResult when a command would store
	// a row whose key in a unique secondary index another row already has.
	// Apply functions refuse such commands themselves, naming what conflicts;
	// this is the store's own guard, checked before anything is written.
	ErrDuplicateKey = errcode.New(codes.AlreadyExists, "duplicate key in a unique index")

	// ErrUnknownTable is returned by StateStore.Index when asked about a table
	// the state store does not have.
	ErrUnknownTable = errcode.New(codes.Internal, "unknown table")

	// ErrSnapshotVersion is returned by Restore when the snapshot was written
	// by a newer format version than this server can read. The current state
	// is left unchanged.
	ErrSnapshotVersion = errcode.New(codes.FailedPrecondition, "unsupported snapshot version")

	// ErrSnapshotCorrupt is returned by Restore when the snapshot stream is
	// truncated, does not decode, or holds rows that cannot be stored. The
	// current state is left unchanged.
	ErrSnapshotCorrupt = errcode.New(codes.DataLoss, "corrupt snapshot")

	// ErrUnexpectedResponse is returned by ResultOf when a raft future resolved
	// with a response that did not come from this package's FSM.
	ErrUnexpectedResponse = errcode.New(codes.Internal, "unexpected raft apply response")
)
