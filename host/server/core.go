package server

import (
	"context"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/versions"
)

// core is the server as its parts see it (evals.Core and the like): the
// local state store, the leader's proposals and the table rule's version
// check. Each part declares the few of these it uses.
type core struct{ s *Server }

// State returns the local state store.
func (c core) State() *fsm.StateStore { return c.s.fsm.State() }

// Apply proposes one command and waits until it is applied (raftApply).
func (c core) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	return c.s.raftApply(ctx, t, msg)
}

// ApplyResult is Apply for commands whose apply returns a value.
func (c core) ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	return c.s.raftApplyResult(ctx, t, msg)
}

// RequireServersAt refuses while a server has not recorded a version
// satisfying v (requireServersAt).
func (c core) RequireServersAt(v versions.Constraint, since, what string) error {
	return c.s.requireServersAt(v, since, what)
}
