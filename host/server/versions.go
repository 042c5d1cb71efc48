package server

import (
	"fmt"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/versions"
)

// requireServersAt refuses, with FailedPrecondition, while a server in
// raft's configuration has not recorded a version satisfying c: the table
// rule's check before proposing a command that writes a new table.
func (s *Server) requireServersAt(c versions.Constraint, since, what string) error {
	servers, err := s.raftServers()
	if err != nil {
		return err
	}
	st := s.fsm.State()
	for _, rs := range servers {
		m, err := st.ServerByID(nil, rs.GetId())
		if err != nil {
			return err
		}
		if m.GetVersion() == "" {
			return &endpoints.GateRefusal{Msg: fmt.Sprintf("%s wait for every server to record its version: server %s (%s) has not yet", what, rs.GetName(), rs.GetId())}
		}
		if !c.Check(m.GetVersion()) {
			return &endpoints.GateRefusal{Msg: fmt.Sprintf("%s need every server at berth %s or later: server %s runs %s; upgrade it", what, since, rs.GetName(), m.GetVersion())}
		}
	}
	return nil
}
