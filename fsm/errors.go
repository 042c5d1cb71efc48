package fsm

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// The bytes of a raft entry are built by berth's servers (Encode, in
// raftApply), never by a caller: a command that is empty, does not decode,
// or was encoded from the wrong message is berth's bug, so those sentinels
// are Internal (HTTP 500), not InvalidArgument (400), which would blame the
// caller. A command from a newer server is Unimplemented; a command that
// decodes but carries unusable content (a missing ID, from a request the
// server passed on) stays InvalidArgument.
var (
	// ErrEmptyCommand is returned by Decode, and in an ApplyResult, when a raft
	// log entry carries no bytes at all, so not even a command type. Raft
	// hands Apply only the command entries servers proposed, so only
	// berth's own proposer can have written it.
	ErrEmptyCommand = errcode.New(codes.Internal, "empty command: no command type byte")

	// ErrUnknownCommand is returned by Encode, Decode and (in an ApplyResult)
	// Apply when the command type byte names no command this version knows and
	// the type is not flagged ignorable. A server applying such an entry is
	// older than the server that proposed it and must be upgraded.
	ErrUnknownCommand = errcode.New(codes.Unimplemented, "unknown command type")

	// ErrMalformedCommand is returned by Decode, and in an ApplyResult, when the
	// command type is known but the bytes after it are not a valid encoding of
	// that command's message.
	ErrMalformedCommand = errcode.New(codes.Internal, "malformed command body")

	// ErrMessageMismatch is returned by Encode when the message given is not
	// the message type the command type carries.
	ErrMessageMismatch = errcode.New(codes.Internal, "message does not match command type")

	// ErrInvalidCommand is returned in an ApplyResult when a command decodes
	// but its content cannot be applied: a missing ID or an unusable status.
	// The state is left unchanged.
	ErrInvalidCommand = errcode.New(codes.InvalidArgument, "invalid command")

	// ErrNodeNotFound is returned in an ApplyResult when a command names a
	// node that is not registered.
	ErrNodeNotFound = errcode.New(codes.NotFound, "node not found")

	// ErrNodeChanged is returned in an ApplyResult when a conditional node
	// status update (if_modify_index) finds the node changed since its
	// proposer read it; nothing is written. Aborted: the proposer decided on
	// a state that is gone, and must read again before deciding anew.
	ErrNodeChanged = errcode.New(codes.Aborted, "node changed since the update was decided")

	// ErrJobNotFound is returned in an ApplyResult when a command names a
	// job that is not stored (never registered, or purged): JobDeregister,
	// JobRevert, and a PlanApply for a purged job.
	ErrJobNotFound = errcode.New(codes.NotFound, "job not found")

	// ErrJobVersionNotFound is returned in an ApplyResult when a JobRevert
	// or a PlanApply names a version of a job that job_versions does not
	// hold (never registered, or dropped as one of the oldest).
	ErrJobVersionNotFound = errcode.New(codes.NotFound, "job version not found")

	// ErrJobChanged is returned in an ApplyResult when a conditional job
	// change (JobRegister's enforce_index, JobRevert's
	// enforce_prior_version) finds the job changed since its proposer read
	// it; nothing is written. Aborted, as ErrNodeChanged: read again.
	ErrJobChanged = errcode.New(codes.Aborted, "job changed since the change was decided")

	// ErrEvalNotFound is returned by the servers' evaluation reads when no
	// evaluation has the ID asked for (the state machine's readers answer
	// nil, so a blocking query can wait for one to appear).
	ErrEvalNotFound = errcode.New(codes.NotFound, "evaluation not found")

	// ErrAllocNotFound is returned by the servers' allocation reads when no
	// allocation has the ID asked for (the state machine's readers answer
	// nil, so a blocking query can wait for one to appear).
	ErrAllocNotFound = errcode.New(codes.NotFound, "allocation not found")

	// ErrAllocNodeMismatch is returned in an ApplyResult when a client's
	// AllocClientUpdate reports on an alloc placed on another node; the
	// whole update is refused, since a client only ever runs its own.
	ErrAllocNodeMismatch = errcode.New(codes.InvalidArgument, "allocation belongs to another node")

	// ErrNodeDraining is returned in an ApplyResult when a NodeEligibility
	// command would make a draining node eligible: a drain keeps its node
	// ineligible until it ends (NodeDrain with no drain).
	ErrNodeDraining = errcode.New(codes.FailedPrecondition, "node is draining")

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
