package endpoints

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GateRefusal is Cluster.RequireServersAt's refusal (FailedPrecondition)
// while some server in raft's configuration is older than a version gate
// or has not recorded its version yet: the cluster is not yet known to be
// past the gate. Its other errors (raft's configuration or the state
// unreadable) are failures, not this answer; callers that fall back to the
// older protocol below a gate (identify) tell the two apart.
type GateRefusal struct{ Msg string }

func (e *GateRefusal) Error() string { return e.Msg }

// GRPCStatus makes the refusal a FailedPrecondition wherever it goes.
func (e *GateRefusal) GRPCStatus() *status.Status {
	return status.New(codes.FailedPrecondition, e.Msg)
}
