package server

import (
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// raftLease is the leader lease raft runs with (leaderLease, or a test's
// option). It is also the shortest heartbeat timeout raft accepts, so it
// is the timeout a hurried election uses.
func (s *Server) raftLease() time.Duration { return s.raftTimeouts.lease }

// raftTimeouts are the timeouts raft was started with: hurryElection
// shortens them for a while and puts them back.
type raftTimeouts struct {
	lease  time.Duration
	normal raft.ReloadableConfig
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
// allows after the leader (dead) died: once a lease has passed since its
// last contact with it. raft has no call for "the leader is gone"; what it
// has is ReloadConfig, which fires a follower's heartbeat timer at once
// when the heartbeat timeout gets shorter. raft requires lease ≤
// heartbeat timeout ≤ election timeout, and berth's lease is the whole
// heartbeat timeout (raft_lease.go), so:
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
// Survivors hurry a step (a tenth of the lease) apart, in the order of
// their IDs. Two candidates asking at the same moment would split the
// vote and both wait an election timeout; one asking first is refused a
// pre-vote by the other (it still has a leader) but then grants that
// other's pre-vote a step later, as a candidate with no leader.
func (s *Server) hurryElection(dead string, changes <-chan raft.Observation) {
	lease := s.raftLease()
	rank, ok := s.survivorRank(dead)
	if !ok {
		return // not a voter: its timer starts no election anyway
	}
	normal := s.raftTimeouts.normal
	due := lease + time.Duration(rank)*(lease/10)

	cur := s.raft.ReloadableConfig()
	if cur.HeartbeatTimeout <= lease {
		cur.HeartbeatTimeout = lease + time.Millisecond
		cur.ElectionTimeout = max(cur.ElectionTimeout, cur.HeartbeatTimeout)
		if err := s.raft.ReloadConfig(cur); err != nil {
			s.logger.Warn("cannot hurry the election", "error", err)
			return
		}
	}
	defer s.restoreTimeouts(normal)

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if _, id := s.raft.LeaderWithID(); id != "" && string(id) != dead {
			return // another survivor won already
		}
		since := time.Since(s.raft.LastContact())
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
	cur = s.raft.ReloadableConfig()
	cur.HeartbeatTimeout, cur.ElectionTimeout = lease, lease
	if err := s.raft.ReloadConfig(cur); err != nil {
		s.logger.Warn("cannot hurry the election", "error", err)
		return
	}
	s.death.hurried.Add(1)
	s.logger.Info("hurried the election: the leader is gone", "dead_leader", dead, "since_contact", time.Since(s.raft.LastContact()), "rank", rank)

	// Keep the hurried timeouts until a leader is known: a new one, this
	// server, or the old one again (it contacted this server after the
	// hurry, so it lives).
	recheck := time.NewTicker(lease / 10)
	defer recheck.Stop()
	for {
		if _, id := s.raft.LeaderWithID(); id != "" && (string(id) != dead || s.raft.LastContact().After(hurried)) {
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

// restoreTimeouts puts the configured heartbeat and election timeouts
// back, unless they are back already.
func (s *Server) restoreTimeouts(normal raft.ReloadableConfig) {
	cur := s.raft.ReloadableConfig()
	if cur.HeartbeatTimeout == normal.HeartbeatTimeout && cur.ElectionTimeout == normal.ElectionTimeout {
		return
	}
	cur.HeartbeatTimeout, cur.ElectionTimeout = normal.HeartbeatTimeout, normal.ElectionTimeout
	if err := s.raft.ReloadConfig(cur); err != nil {
		s.logger.Warn("cannot restore raft's timeouts after a hurried election", "error", err)
	}
}

// survivorRank is this server's place among the voters other than dead,
// ordered by ID; ok is false when this server is not a voter.
func (s *Server) survivorRank(dead string) (rank int, ok bool) {
	f := s.raft.GetConfiguration()
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
