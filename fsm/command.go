package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MessageType is the first byte of every raft log entry berth writes: it says
// which command message follows.
//
// Numbers are append-only: a number, once released, keeps its meaning forever
// and is never reused, because old entries stay in raft logs and snapshots of
// clusters that upgrade. The high bit, IgnoreUnknownFlag, marks commands that
// an older server which does not know them may skip.
type MessageType uint8

// IgnoreUnknownFlag marks a command type that a server which does not know it
// may skip (logging that it did) instead of failing the entry. Only commands
// whose loss cannot make an older server's state wrong may carry it.
const IgnoreUnknownFlag MessageType = 0x80

// Commands. Append only; see MessageType.
const (
	// NodeRegister carries a *pb.NodeRegisterCommand.
	NodeRegister MessageType = 1
	// NodeStatusUpdate carries a *pb.NodeStatusUpdateCommand.
	NodeStatusUpdate MessageType = 2
	// NodeDeregister carries a *pb.NodeDeregisterCommand.
	NodeDeregister MessageType = 3
	// ServerUpsert carries a *pb.ServerUpsertCommand.
	ServerUpsert MessageType = 4
	// ServerDelete carries a *pb.ServerDeleteCommand.
	ServerDelete MessageType = 5
	// JobRegister carries a *pb.JobRegisterCommand.
	JobRegister MessageType = 6
	// JobDeregister carries a *pb.JobDeregisterCommand.
	JobDeregister MessageType = 7
	// JobRevert carries a *pb.JobRevertCommand.
	JobRevert MessageType = 8
	// EvalUpsert carries a *pb.EvalUpsertCommand.
	EvalUpsert MessageType = 9
	// PlanApply carries a *pb.PlanApplyCommand; its ApplyResult.Response
	// is a *pb.PlanResult (PlanResultOf).
	PlanApply MessageType = 10
	// AllocClientUpdate carries a *pb.AllocClientUpdateCommand.
	AllocClientUpdate MessageType = 11
	// AllocDesiredTransition carries a *pb.AllocDesiredTransitionCommand.
	AllocDesiredTransition MessageType = 12
	// NodeEligibility carries a *pb.NodeEligibilityCommand.
	NodeEligibility MessageType = 13
	// NodeDrain carries a *pb.NodeDrainCommand.
	NodeDrain MessageType = 14
	// GC carries a *pb.GCCommand.
	GC MessageType = 15
	// NodeCSIUpdate carries a *pb.NodeCSIUpdateCommand. It writes the
	// csi_plugins table: proposed only once every server knows it (the
	// table rule, doc.go).
	NodeCSIUpdate MessageType = 16
	// VolumeRegister carries a *pb.VolumeRegisterCommand. It and the
	// commands below write the volumes, claims and attachments tables:
	// proposed only once every server knows them (the table rule).
	VolumeRegister MessageType = 17
	// VolumeDeregister carries a *pb.VolumeDeregisterCommand.
	VolumeDeregister MessageType = 18
	// ClaimUpdate carries a *pb.ClaimUpdateCommand.
	ClaimUpdate MessageType = 19
	// AttachmentUpdate carries a *pb.AttachmentUpdateCommand.
	AttachmentUpdate MessageType = 20
	// OperatorClaim carries a *pb.OperatorClaimCommand.
	OperatorClaim MessageType = 21
	// OperatorClaimRelease carries a *pb.OperatorClaimReleaseCommand.
	OperatorClaimRelease MessageType = 22
	// NodeFence carries a *pb.NodeFenceCommand.
	NodeFence MessageType = 23
	// VolumeDeleting carries a *pb.VolumeDeletingCommand. It writes the
	// volumes table: proposed only once every server knows it.
	VolumeDeleting MessageType = 24

	// HostVolumeRegister records a dynamic host volume its node made, or
	// moves it to deleting (refused while claimed); HostVolumeDelete
	// forgets it (apply_host_volume.go).
	HostVolumeRegister MessageType = 25
	HostVolumeDelete   MessageType = 26
	// The ACL commands (fsm/acl.go) write the acl_* tables, proposed only
	// once every server knows them (aclSince). Not ignorable: an older
	// server that skipped one would answer with the wrong permissions.

	// ACLPolicyUpsert carries a *pb.ACLPolicyUpsertCommand.
	ACLPolicyUpsert MessageType = 27
	// ACLPolicyDelete carries a *pb.ACLPolicyDeleteCommand.
	ACLPolicyDelete MessageType = 28
	// ACLTokenUpsert carries a *pb.ACLTokenUpsertCommand.
	ACLTokenUpsert MessageType = 29
	// ACLTokenDelete carries a *pb.ACLTokenDeleteCommand.
	ACLTokenDelete MessageType = 30
	// ACLBootstrap carries a *pb.ACLBootstrapCommand.
	ACLBootstrap MessageType = 31
	// NodeReadmit carries a *pb.NodeReadmitCommand: it clears a node's
	// secret hash so the node's next registration sets a new secret
	// (apply_node_identity.go); proposed only once every server knows node
	// identities (gate nodeSecretsSince in host/server/endpoints).
	NodeReadmit MessageType = 32
)

// command is one row of the dispatch table.
type command struct {
	name string
	// message is the command's message type (Encode checks it, Decode
	// builds it).
	message protoreflect.MessageType
	// decode reads a command body with proto.Unmarshal.
	decode func(body []byte) (proto.Message, error)
	apply  func(tx *writeTxn, msg proto.Message) error
}

// commands is the dispatch table: every command this version can apply. A new
// command is a new constant above, an apply function, and a line here.
var commands = map[MessageType]command{
	NodeRegister:     newCommand("NodeRegister", applyNodeRegister),
	NodeStatusUpdate: newCommand("NodeStatusUpdate", applyNodeStatusUpdate),
	NodeDeregister:   newCommand("NodeDeregister", applyNodeDeregister),
	ServerUpsert:     newCommand("ServerUpsert", applyServerUpsert),
	ServerDelete:     newCommand("ServerDelete", applyServerDelete),

	JobRegister:            newCommand("JobRegister", applyJobRegister),
	JobDeregister:          newCommand("JobDeregister", applyJobDeregister),
	JobRevert:              newCommand("JobRevert", applyJobRevert),
	EvalUpsert:             newCommand("EvalUpsert", applyEvalUpsert),
	PlanApply:              newCommand("PlanApply", applyPlanApply),
	AllocClientUpdate:      newCommand("AllocClientUpdate", applyAllocClientUpdates),
	AllocDesiredTransition: newCommand("AllocDesiredTransition", applyAllocDesiredTransition),
	NodeEligibility:        newCommand("NodeEligibility", applyNodeEligibility),
	NodeDrain:              newCommand("NodeDrain", applyNodeDrain),
	GC:                     newCommand("GC", applyGC),
	NodeCSIUpdate:          newCommand("NodeCSIUpdate", applyNodeCSIUpdate),

	VolumeRegister:       newCommand("VolumeRegister", applyVolumeRegister),
	VolumeDeregister:     newCommand("VolumeDeregister", applyVolumeDeregister),
	ClaimUpdate:          newCommand("ClaimUpdate", applyClaimUpdate),
	AttachmentUpdate:     newCommand("AttachmentUpdate", applyAttachmentUpdate),
	OperatorClaim:        newCommand("OperatorClaim", applyOperatorClaim),
	OperatorClaimRelease: newCommand("OperatorClaimRelease", applyOperatorClaimRelease),
	NodeFence:            newCommand("NodeFence", applyNodeFence),
	VolumeDeleting:       newCommand("VolumeDeleting", applyVolumeDeleting),

	HostVolumeRegister: newCommand("HostVolumeRegister", applyHostVolumeRegister),
	HostVolumeDelete:   newCommand("HostVolumeDelete", applyHostVolumeDelete),
	ACLPolicyUpsert:    newCommand("ACLPolicyUpsert", applyACLPolicyUpsert),
	ACLPolicyDelete:    newCommand("ACLPolicyDelete", applyACLPolicyDelete),
	ACLTokenUpsert:     newCommand("ACLTokenUpsert", applyACLTokenUpsert),
	ACLTokenDelete:     newCommand("ACLTokenDelete", applyACLTokenDelete),
	ACLBootstrap:       newCommand("ACLBootstrap", applyACLBootstrap),
	NodeReadmit:        newCommand("NodeReadmit", applyNodeReadmit),
}

// newCommand builds a table row from a typed apply function, which receives
// the command decoded by proto.Unmarshal as its own message type M (owned
// by the apply function: it is decoded for this entry alone, so parts of
// it may be stored as they are). The table does the one type assertion.
func newCommand[T any, M interface {
	*T
	proto.Message
}](name string, apply func(tx *writeTxn, msg M) error) command {
	return command{
		name:    name,
		message: M(nil).ProtoReflect().Type(),
		decode: func(body []byte) (proto.Message, error) {
			m := M(new(T))
			if err := proto.Unmarshal(body, m); err != nil {
				return nil, err
			}
			return m, nil
		},
		apply: func(tx *writeTxn, msg proto.Message) error {
			m, ok := msg.(M)
			if !ok {
				return fmt.Errorf("%w: %s applies a %T, got %T", ErrMessageMismatch, name, m, msg)
			}
			return apply(tx, m)
		},
	}
}

// String returns the command's name ("NodeRegister"), or "Unknown(N)" for a
// type this version does not know. Names are stable: they are metric labels.
func (t MessageType) String() string {
	if c, ok := commands[t]; ok {
		return c.name
	}
	return fmt.Sprintf("Unknown(%d)", uint8(t))
}

// Ignorable reports whether a server that does not know t may skip it.
func (t MessageType) Ignorable() bool {
	return t&IgnoreUnknownFlag != 0
}

// Known reports whether this version can decode and apply t.
func (t MessageType) Known() bool {
	_, ok := commands[t]
	return ok
}

// PeekType returns the command type of a raft log entry's data without
// decoding the body, so a wrapper can label metrics before or after applying.
// It returns 0, which is no command, for empty data.
func PeekType(data []byte) MessageType {
	if len(data) == 0 {
		return 0
	}
	return MessageType(data[0])
}

// encodeOptions makes map fields encode in a fixed order, so proposing the
// same command twice yields the same bytes (easier to compare in logs and
// tests; decoding does not depend on it).
var encodeOptions = proto.MarshalOptions{Deterministic: true}

// Encode returns the raft log entry for command t carrying msg: the type byte
// followed by msg's protobuf encoding. It fails with ErrUnknownCommand for a
// type this version does not know and with ErrMessageMismatch when msg is not
// the message t carries, so a wrong pairing is caught by the proposer rather
// than by every server's Apply.
func Encode(t MessageType, msg proto.Message) ([]byte, error) {
	c, ok := commands[t]
	if !ok {
		return nil, fmt.Errorf("encoding command: %w: %d", ErrUnknownCommand, uint8(t))
	}
	if msg == nil || !msg.ProtoReflect().IsValid() {
		return nil, fmt.Errorf("encoding %s command: %w: message is nil", c.name, ErrMessageMismatch)
	}
	if got, want := msg.ProtoReflect().Descriptor().FullName(), c.message.Descriptor().FullName(); got != want {
		return nil, fmt.Errorf("encoding %s command: %w: want %s, got %s", c.name, ErrMessageMismatch, want, got)
	}
	buf := make([]byte, 1, 1+proto.Size(msg))
	buf[0] = byte(t)
	buf, err := encodeOptions.MarshalAppend(buf, msg)
	if err != nil {
		return nil, fmt.Errorf("encoding %s command: %w", c.name, err)
	}
	return buf, nil
}

// Decode splits a raft log entry into its command type and decoded message.
// The message's concrete type is the one documented on the command constant.
// Errors wrap ErrEmptyCommand, ErrUnknownCommand (also for unknown types that
// are flagged ignorable: Decode cannot decode them either) or
// ErrMalformedCommand, and name the command type.
func Decode(buf []byte) (MessageType, proto.Message, error) {
	if len(buf) == 0 {
		return 0, nil, ErrEmptyCommand
	}
	t := MessageType(buf[0])
	c, ok := commands[t]
	if !ok {
		return t, nil, unknownCommandError(t)
	}
	msg, err := c.decode(buf[1:])
	if err != nil {
		return t, nil, fmt.Errorf("%w: %s (type %d), %d body bytes: %w", ErrMalformedCommand, c.name, uint8(t), len(buf)-1, err)
	}
	return t, msg, nil
}

func unknownCommandError(t MessageType) error {
	if t.Ignorable() {
		return fmt.Errorf("%w: %d (flagged ignorable)", ErrUnknownCommand, uint8(t))
	}
	return fmt.Errorf("%w: %d", ErrUnknownCommand, uint8(t))
}
