package fsm

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/rules"
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
	// It is rules.ErrInvalidCommand, which rules.CheckClaim wraps.
	ErrInvalidCommand = rules.ErrInvalidCommand

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

	// ErrVolumeNotFound is returned in an ApplyResult when a command names a
	// volume that is not registered (an operator claim), and by the
	// servers' volume reads.
	ErrVolumeNotFound = errcode.New(codes.NotFound, "volume not found")

	// ErrVolumeInUse is returned in an ApplyResult when a VolumeDeregister
	// finds claims on the volume (without force, any claim; with force, a
	// claim whose claimant is not terminal; with or without force, an
	// attachment not yet unpublished), or a VolumeRegister would change
	// what its claims depend on (plugin, external ID, a claimed
	// capability). The message names the volume and the claims or the
	// attachments (node and state).
	ErrVolumeInUse = errcode.New(codes.FailedPrecondition, "volume is in use")

	// ErrHostVolumeNameTaken is returned in an ApplyResult when a
	// HostVolumeRegister names a volume another dynamic host volume of the
	// node has the name of: group volumes name host volumes by name.
	ErrHostVolumeNameTaken = errcode.New(codes.AlreadyExists, "the node has a host volume of that name")

	// ErrHostVolumeMarkChanged is returned in an ApplyResult when a failed
	// delete's put_back finds the volume no longer under its deleting mark
	// (forgotten, or re-marked by another delete): it is left as it is.
	ErrHostVolumeMarkChanged = errcode.New(codes.Aborted, "the host volume's deleting mark changed")

	// ErrHostVolumeNotPending is returned in an ApplyResult when a node's
	// report promoting a pending host volume to ready (must_exist with
	// mark_index) finds it moved on since it was read (its create's answer
	// recorded it ready, a delete marked it): it is left as it is.
	ErrHostVolumeNotPending = errcode.New(codes.Aborted, "the host volume is no longer pending")

	// ErrVolumeDeleting is returned in an ApplyResult when a claim (a
	// plan's, an operator's) or a VolumeRegister names a volume its plugin
	// is deleting (Volume.deleting, set by VolumeDeleting): the data under
	// it may already be gone. The message names the volume.
	// It is rules.ErrVolumeDeleting, which rules.CheckClaim wraps.
	ErrVolumeDeleting = rules.ErrVolumeDeleting

	// ErrExternalVolumeTaken is returned in an ApplyResult when a
	// VolumeRegister names a plugin's volume (plugin and external ID) that
	// is registered already under another volume ID: two IDs for one
	// volume would let two single-writer claims reach it. The message
	// names both volume IDs, the plugin and the external ID.
	ErrExternalVolumeTaken = errcode.New(codes.AlreadyExists, "the plugin's volume is registered under another volume ID")

	// ErrVolumeRegistered is returned in an ApplyResult when a
	// VolumeRegister with if_absent (a create) finds a volume registered
	// under its ID; nothing is written. The message names the volume and
	// the external ID it is registered with.
	ErrVolumeRegistered = errcode.New(codes.AlreadyExists, "a volume is registered under the ID")

	// ErrVolumeChanged is returned in an ApplyResult when a conditional
	// VolumeRegister (if_modify_index) finds the volume changed since its
	// proposer read it; nothing is written. Aborted, as ErrNodeChanged:
	// read again before deciding anew.
	ErrVolumeChanged = errcode.New(codes.Aborted, "volume changed since the update was decided")

	// ErrNoFreeClaim is returned in an ApplyResult when an operator claim
	// does not fit the volume's access mode beside the claims it holds (a
	// second writer, another node, another access mode); a plan's node
	// refuses for the same reasons, naming volume, alloc and node.
	// It is rules.ErrNoFreeClaim, which rules.CheckClaim wraps.
	ErrNoFreeClaim = rules.ErrNoFreeClaim

	// ErrClaimCapability is returned in an ApplyResult when a claim asks for
	// a capability the volume does not have, or to write through a
	// reader-only access mode.
	// It is rules.ErrClaimCapability, which rules.CheckClaim wraps.
	ErrClaimCapability = rules.ErrClaimCapability

	// ErrMaxVolumes is returned in an ApplyResult when a claim would add a
	// volume to a node whose instance of the volume's plugin reports
	// max_volumes and already holds claims on that many volumes of the
	// plugin (claims written earlier in the raft batch and in the same
	// command included); a plan's node refuses for it too. The message
	// names the volume, the node and the plugin.
	ErrMaxVolumes = errcode.New(codes.ResourceExhausted, "node plugin holds its max volumes")

	// ErrClaimNotFound is returned in an ApplyResult when a claim update or
	// release names a claim that is not stored (a move to freed of a claim
	// that is gone is no error: it is done).
	ErrClaimNotFound = errcode.New(codes.NotFound, "claim not found")

	// ErrClaimTransition is returned in an ApplyResult when a claim update
	// would move a claim backwards or skip a step its state machine needs
	// (DESIGN "Claim and attachment states"). Nothing is written.
	ErrClaimTransition = errcode.New(codes.FailedPrecondition, "claim cannot move to that state")

	// ErrClaimNodeMismatch is returned in an ApplyResult when a client
	// reports on a claim held on another node.
	ErrClaimNodeMismatch = errcode.New(codes.InvalidArgument, "claim belongs to another node")

	// ErrNotOperatorClaim is returned in an ApplyResult when an operator
	// release names an allocation's claim: those are released when their
	// allocation stops.
	ErrNotOperatorClaim = errcode.New(codes.InvalidArgument, "claim is not an operator claim")

	// ErrAttachmentNotFound is returned in an ApplyResult when an attachment
	// update names a (volume, node) attachment that is not stored.
	ErrAttachmentNotFound = errcode.New(codes.NotFound, "attachment not found")

	// ErrAttachmentTransition is returned in an ApplyResult when an
	// attachment update would move it backwards, skip a step, or detach
	// it while a live claim on its node needs it.
	ErrAttachmentTransition = errcode.New(codes.FailedPrecondition, "attachment cannot move to that state")

	// ErrNodeUnavailable is returned in an ApplyResult when an operator
	// claim names a node that is down or fenced.
	ErrNodeUnavailable = errcode.New(codes.FailedPrecondition, "node is down or fenced")

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

	// ErrPlanUnseenHistory is returned by PlanApply, for a plan proposed
	// with refuse_unseen_history, when the plan was made from a state this
	// store never held: its snapshot index is above the store's latest
	// index (a snapshot restore replaced the state the plan was made from).
	ErrPlanUnseenHistory = errcode.New(codes.Aborted, "plan was made from a state this store never held")

	// ErrUnexpectedResponse is returned by ResultOf when a raft future resolved
	// with a response that did not come from this package's FSM.
	ErrUnexpectedResponse = errcode.New(codes.Internal, "unexpected raft apply response")
)
