package server

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrServerBelowGate refuses a server joining, or being recorded, with a
// version below an in-apply gate that holds (fsm.ApplyGate): it would
// apply the same log to a different state.
var ErrServerBelowGate = errcode.New(codes.FailedPrecondition, "server version below a gate the cluster applies")

// refuseBelowGates answers ErrServerBelowGate, naming the server, its
// version and the gates, when m's version does not satisfy an in-apply
// gate that holds in the servers table; nil otherwise. The leader checks
// it before adding a server to raft (Join) and before recording one.
func (s *Server) refuseBelowGates(m *pb.ServerMember) error {
	gates, err := s.fsm.State().ApplyGatesRefusing(m.GetVersion())
	if err != nil || len(gates) == 0 {
		return err
	}
	v := m.GetVersion()
	if v == "" {
		v = "no version"
	}
	var gs []string
	for _, g := range gates {
		gs = append(gs, fmt.Sprintf("%s (%s: it would lose %s)", g.Name, g.Since, g.Loses))
	}
	return fmt.Errorf("%w: server %s (%s) runs %s, below what every recorded server is at, so the applies follow %s; upgrade it (a downgrade needs a snapshot from before the upgrade)",
		ErrServerBelowGate, m.GetName(), m.GetId(), v, strings.Join(gs, ", "))
}
