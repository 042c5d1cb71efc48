package server

import (
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftLease is the leader lease raft runs with (leaderLease, or a test's
// option). It is also the shortest heartbeat timeout raft accepts, so it
// is the timeout a hurried election uses.
func (s *Server) raftLease() time.Duration { return s.raftTimeouts.lease }

// raftTimeouts are the timeouts raft was started with: hurryElection
// shortens them for a while and puts them back. mu serialises berth's
// read-modify-write of raft's reloadable config (raft leaves that to its
// caller) and guards normal, so a later change of the configured timeouts
// (setNormalTimeouts) is what a hurry restores.
type raftTimeouts struct {
	lease time.Duration

	mu     sync.Mutex
	normal raft.ReloadableConfig

	// stub, if set, stands in for s.raft (tests of the hurry alone).
	stub hurryRaft
}

// hurryRaft is the part of *raft.Raft the hurry uses (a stub in tests).
type hurryRaft interface {
	LeaderWithID() (raft.ServerAddress, raft.ServerID)
	LastContact() time.Time
	ReloadableConfig() raft.ReloadableConfig
	ReloadConfig(raft.ReloadableConfig) error
	GetConfiguration() raft.ConfigurationFuture
}

// tunedRaft is the raft the hurry acts on: s.raft, or a test's stub.
func (s *Server) tunedRaft() hurryRaft {
	if s.raftTimeouts.stub != nil {
		return s.raftTimeouts.stub
	}
	return s.raft
}

// reloadTimeouts sets raft's heartbeat and election timeouts, keeping the
// rest of its reloadable config.
func (s *Server) reloadTimeouts(hb, election time.Duration) error {
	s.raftTimeouts.mu.Lock()
	defer s.raftTimeouts.mu.Unlock()
	r := s.tunedRaft()
	cur := r.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = hb, election
	return r.ReloadConfig(cur)
}

// setNormalTimeouts changes the configured heartbeat and election
// timeouts: raft runs with them now, and a hurry puts them back after.
func (s *Server) setNormalTimeouts(hb, election time.Duration) error {
	s.raftTimeouts.mu.Lock()
	defer s.raftTimeouts.mu.Unlock()
	r := s.tunedRaft()
	cur := r.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = hb, election
	if err := r.ReloadConfig(cur); err != nil {
		return err
	}
	s.raftTimeouts.normal = cur
	return nil
}

// normalTimeouts is the configured heartbeat and election timeouts.
func (s *Server) normalTimeouts() raft.ReloadableConfig {
	s.raftTimeouts.mu.Lock()
	defer s.raftTimeouts.mu.Unlock()
	return s.raftTimeouts.normal
}

// useRaftLease gives rc a test's lease, if it set one, and records the
// lease raft will run with.
func (s *Server) useRaftLease(rc *raft.Config) {
	if s.opts.raftLease > 0 {
		rc.LeaderLeaseTimeout = s.opts.raftLease
	}
	s.raftTimeouts.lease = rc.LeaderLeaseTimeout
}

// hurryElection makes this follower call an election as soon as raft
// allows after the leader (dead, serving berth RPC at addr) died: once a
// lease has passed since its last contact with it. raft has no call for
// "the leader is gone"; what it has is ReloadConfig, which fires a
// follower's heartbeat timer at once when the heartbeat timeout gets
// shorter. raft requires lease ≤ heartbeat timeout ≤ election timeout,
// and berth's lease is the whole heartbeat timeout (raft_lease.go), so:
//
//  1. at once, lengthen both timeouts by a millisecond past the lease
//     (this fires nothing; it makes room for step 2 to be a shortening);
//  2. once the lease has passed since the last contact (plus a step per
//     survivor ranked before this one), set both timeouts to the lease.
//     raft's timer fires, finds no contact for a whole heartbeat timeout,
//     and this server becomes a candidate;
//  3. once a leader is known again, put the configured timeouts back
//     (with berth's lease they are already back after step 2).
//
// During step 1 the detection may prove false: raft runs on its own
// address, so the leader's RPC port can refuse while raft lives (a
// firewall rule on that port only, an RPC listener that died). When the
// leader contacted this server after the detection and a new dial to addr
// is no longer refused, the hurry is given up (abandoned) and the watcher
// goes back to watching the connection. While the dial is still refused
// (a leader shutting down gracefully: raft outlives its RPC server by up
// to a few seconds) it keeps waiting.
//
// Survivors hurry a step (a quarter of the lease) apart, in the order of
// their IDs. Two candidates asking at the same moment would split the
// vote and both wait an election timeout; one asking first is refused a
// pre-vote by the other (it still has a leader) but then grants that
// other's pre-vote a step later, as a candidate with no leader. The step
// must exceed the spread of the survivors' last contacts: raft's leader
// heartbeats each follower on its own random interval of 0.1–0.2
// heartbeat timeouts (lease == heartbeat timeout in berth), so at the kill
// their last contacts differ by up to a fifth of the lease; a quarter
// covers that plus the few milliseconds between their detections. The
// order is still best-effort: a follower whose heartbeat was delayed
// longer than that (a slow network) may ask out of turn, and then raft's
// randomised election timeout settles it, as without the hurry.
func (s *Server) hurryElection(dead, addr string, changes <-chan raft.Observation) {
	r := s.tunedRaft()
	lease := s.raftLease()
	rank, ok := s.survivorRank(dead)
	if !ok {
		return // not a voter: its timer starts no election anyway
	}
	detectedAt := time.Now()
	due := lease + time.Duration(rank)*hurryStep(lease)

	normal := s.normalTimeouts()
	if r.ReloadableConfig().HeartbeatTimeout <= lease {
		longer := lease + time.Millisecond
		if err := s.reloadTimeouts(longer, max(normal.ElectionTimeout, longer)); err != nil {
			s.logger.Warn("cannot hurry the election", "error", err)
			return
		}
	}
	defer s.restoreTimeouts()

	probe := s.death.probe
	if probe == nil {
		probe = probeRefused
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if _, id := r.LeaderWithID(); id != "" && string(id) != dead {
			return // another survivor won already
		}
		last := r.LastContact()
		if last.After(detectedAt) && !probe(s.shutdownCtx, addr) {
			if s.shutdownCtx.Err() != nil {
				return
			}
			s.death.abandoned.Add(1)
			s.logger.Warn("the leader taken for dead still leads: its raft contacted this server and its RPC address answers again", "leader", dead, "rpc", addr)
			return
		}
		since := time.Since(last)
		if since >= due {
			break
		}
		timer.Reset(due - since)
		select {
		case <-timer.C:
		case <-changes:
		case <-s.shutdownCtx.Done():
			return
		}
	}

	hurried := time.Now()
	if err := s.reloadTimeouts(lease, lease); err != nil {
		s.logger.Warn("cannot hurry the election", "error", err)
		return
	}
	s.death.hurried.Add(1)
	s.logger.Info("hurried the election: the leader is gone", "dead_leader", dead, "since_contact", time.Since(r.LastContact()), "rank", rank)

	// Keep the hurried timeouts until a leader is known: a new one, this
	// server, or the old one again (it contacted this server after the
	// hurry, so it lives).
	recheck := time.NewTicker(lease / 10)
	defer recheck.Stop()
	for {
		if _, id := r.LeaderWithID(); id != "" && (string(id) != dead || r.LastContact().After(hurried)) {
			return
		}
		select {
		case <-changes:
		case <-recheck.C:
		case <-s.shutdownCtx.Done():
			return
		}
	}
}

// hurryStep is how far apart, in rank order, the survivors hurry.
func hurryStep(lease time.Duration) time.Duration { return lease / 4 }

// restoreTimeouts puts the configured heartbeat and election timeouts
// back, unless they are back already.
func (s *Server) restoreTimeouts() {
	s.raftTimeouts.mu.Lock()
	defer s.raftTimeouts.mu.Unlock()
	r := s.tunedRaft()
	normal := s.raftTimeouts.normal
	cur := r.ReloadableConfig()
	if cur.HeartbeatTimeout == normal.HeartbeatTimeout && cur.ElectionTimeout == normal.ElectionTimeout {
		return
	}
	cur.HeartbeatTimeout, cur.ElectionTimeout = normal.HeartbeatTimeout, normal.ElectionTimeout
	if err := r.ReloadConfig(cur); err != nil {
		s.logger.Warn("cannot restore raft's timeouts after a hurried election", "error", err)
	}
}

// survivorRank is this server's place among the voters other than dead,
// ordered by ID; ok is false when this server is not a voter.
func (s *Server) survivorRank(dead string) (rank int, ok bool) {
	f := s.tunedRaft().GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, false
	}
	var ids []string
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter && string(srv.ID) != dead {
			ids = append(ids, string(srv.ID))
		}
	}
	slices.Sort(ids)
	i := slices.Index(ids, s.id)
	return i, i >= 0
}
