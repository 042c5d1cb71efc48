package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// memberBelowGateEvery is how often the leader says, per server, that a
// raft member reports a version below an in-apply gate.
const memberBelowGateEvery = time.Minute

// memberBelowGateLog remembers when the leader last logged each server
// below a gate.
type memberBelowGateLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// due reports whether id's line is due at now, recording it if so.
func (l *memberBelowGateLog) due(id string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[id]; ok && now.Sub(t) < memberBelowGateEvery {
		return false
	}
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	l.last[id] = now
	return true
}

// warnMemberBelowGates logs at Error, at most once a minute per server,
// that m, whose Join refuseBelowGates refused with refusal, is already in
// the raft configuration: the refusal keeps it out of the servers table,
// not out of raft (a server downgraded in place), where it applies the
// log with code that does not keep what the gates keep and may win an
// election. Removing a voter is left to the operator.
func (s *Server) warnMemberBelowGates(m *pb.ServerMember, refusal error) {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	member := false
	for _, srv := range f.Configuration().Servers {
		member = member || string(srv.ID) == m.GetId()
	}
	if !member || !s.belowGate.due(m.GetId(), s.cfg.Clock.Now()) {
		return
	}
	v := m.GetVersion()
	if v == "" {
		v = "no version"
	}
	s.logger.Error("a raft member runs a version below the gates this cluster applies: it applies the log without what they keep, its state diverges, and should it lead it would record its version and turn the gates off on every server; upgrade it, or remove it (operator raft remove-peer) and restore the cluster from a snapshot taken before the upgrade",
		"server", m.GetName(), "id", m.GetId(), "version", v, "refusal", refusal)
}

// belowGate reports whether err is ErrServerBelowGate, here or from the
// leader over gRPC (FailedPrecondition with its message; errors.Is does
// not see through a status).
func belowGate(err error) bool {
	if errors.Is(err, ErrServerBelowGate) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && errcode.Code(err) == codes.FailedPrecondition && strings.Contains(st.Message(), ErrServerBelowGate.Error())
}

// belowGateBackoff spaces the registrations of a server below a gate: it
// cannot succeed until the server is upgraded (or the cluster restored).
var belowGateBackoff = backoff.Backoff{Initial: 10 * time.Second, Max: 5 * time.Minute, Jitter: 0.1}

// registerRound is one discovery round's ensureRegistered. A refusal
// because this server is below an in-apply gate is logged at Error, with
// the leader's words naming the gates, and the next try is backed off;
// until then a round does nothing. Other errors are returned, logged at
// Debug (the round retries within a second).
func (d *discovery) registerRound(ctx context.Context) error {
	s := d.s
	now := s.cfg.Clock.Now()
	if now.Before(d.belowGateNext) {
		return nil
	}
	err := d.ensureRegistered(ctx)
	if !belowGate(err) {
		d.belowGateTries, d.belowGateNext = 0, time.Time{}
		if err != nil {
			s.logger.Debug("recording server in state", "error", err)
		}
		return err
	}
	d.belowGateTries++
	wait := belowGateBackoff.Delay(d.belowGateTries)
	d.belowGateNext = now.Add(wait)
	s.logger.Error("this server is not recorded: its version is below a gate the cluster applies; upgrade it", "version", s.cfg.Version, "error", err, "next_try", wait)
	return nil
}
