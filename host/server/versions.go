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
		v := s.cfg.Version
		// The server asking runs its own version, recorded or not: a new
		// leader marks itself ready before its own record commits, and a
		// request in that window (a dev agent's first `volume create`)
		// must not be refused for want of it.
		if rs.GetId() != s.id {
			m, err := st.ServerByID(nil, rs.GetId())
			if err != nil {
				return err
			}
			v = m.GetVersion()
		}
		if v == "" {
			return &endpoints.GateRefusal{Msg: fmt.Sprintf("%s wait for every server to record its version: server %s (%s) has not yet", what, rs.GetName(), rs.GetId())}
		}
		if !c.Check(v) {
			return &endpoints.GateRefusal{Msg: fmt.Sprintf("%s need every server at berth %s or later: server %s runs %s; upgrade it", what, since, rs.GetName(), v)}
		}
	}
	return nil
}
