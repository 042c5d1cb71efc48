package rules

import (
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// CheckClaim's refusals. The state machine returns them in its
// ApplyResults under the same names (fsm.ErrNoFreeClaim is ErrNoFreeClaim),
// so errors.Is matches whichever package a caller names.
var (
	// ErrInvalidCommand is returned by CheckClaim for a claim that neither
	// reads nor writes. The state machine returns it in an ApplyResult when
	// a command decodes but its content cannot be applied: a missing ID or
	// an unusable status. The state is left unchanged.
	ErrInvalidCommand = errcode.New(codes.InvalidArgument, "invalid command")

	// ErrVolumeDeleting is returned by CheckClaim, and in an ApplyResult,
	// when a claim (a plan's, an operator's) or a VolumeRegister names a
	// volume its plugin is deleting (Volume.deleting, set by
	// VolumeDeleting): the data under it may already be gone. The message
	// names the volume.
	ErrVolumeDeleting = errcode.New(codes.FailedPrecondition, "volume is being deleted")

	// ErrNoFreeClaim is returned by CheckClaim, and in an ApplyResult, when
	// a claim does not fit the volume's access mode beside the claims it
	// holds (a second writer, another node, another access mode); a plan's
	// node refuses for the same reasons, naming volume, alloc and node.
	ErrNoFreeClaim = errcode.New(codes.ResourceExhausted, "no free claim on the volume")

	// ErrClaimCapability is returned by CheckClaim, and in an ApplyResult,
	// when a claim asks for a capability the volume does not have, or to
	// write through a reader-only access mode.
	ErrClaimCapability = errcode.New(codes.InvalidArgument, "volume does not offer the claimed capability")
)
