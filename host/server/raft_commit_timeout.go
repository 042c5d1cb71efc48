package server

import (
	"fmt"
	"time"
)

// DefaultRaftCommitTimeout is raft's CommitTimeout unless the agent's
// server.raft_commit_timeout says otherwise. A follower learns the
// leader's commit index only from the replication stream, and with no new
// entry to send the leader sends it after a random wait of one to two
// CommitTimeouts. A client's blocking query served by a follower waits
// that long to see a commit that is the last for a while — the plan that
// places its alloc, the attachment that readies its claim — so raft's
// default, 50 ms, put 50–100 ms into each such step of a volume move (an
// idle follower applied a commit 58–98 ms after the leader; 6–20 ms at
// 5 ms). The cost: an idle leader sends each follower an empty append
// every 5–10 ms, about 130 a second per follower (three idle servers in
// one process: 0.9–1.0 % of a core at 50 ms, 3.1–3.3 % at 5 ms; more
// over TCP and TLS). It does not grow with nodes, and a busy cluster's log
// is rarely quiet for 5 ms, so there the gain and the cost both mostly
// vanish: the gain is for small or idle clusters and a burst's last
// commit. An operator of many idle servers who cares more for their CPU
// than for follower staleness sets raft_commit_timeout = "50ms".
const DefaultRaftCommitTimeout = 5 * time.Millisecond

// Bounds of raft_commit_timeout: raft refuses less than a millisecond,
// and past a second a follower would lag an idle leader's last commit by
// up to two seconds.
const (
	minRaftCommitTimeout = time.Millisecond
	maxRaftCommitTimeout = time.Second
)

// CheckRaftCommitTimeout refuses a raft commit timeout out of bounds.
func CheckRaftCommitTimeout(d time.Duration) error {
	if d < minRaftCommitTimeout || d > maxRaftCommitTimeout {
		return fmt.Errorf("must be between %s and %s, got %s", minRaftCommitTimeout, maxRaftCommitTimeout, d)
	}
	return nil
}

// commitTimeout is the CommitTimeout raftConfig gives raft: the one
// configured, or the default scaled up like raft's other timeouts but
// never down (a scale below one, in tests, would only cost CPU).
func (c *Config) commitTimeout() time.Duration {
	if c.RaftCommitTimeout > 0 {
		return c.RaftCommitTimeout
	}
	return max(time.Duration(float64(DefaultRaftCommitTimeout)*c.RaftTimeoutScale), DefaultRaftCommitTimeout)
}
