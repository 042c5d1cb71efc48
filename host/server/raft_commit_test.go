package server

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestFollowersLearnCommitsPromptly: raft's CommitTimeout, the wait after
// which an idle leader tells its followers what it committed, is 5 ms
// (scaled up like raft's other timeouts, never down), not raft's default
// 50 ms: a
// client's blocking query on a follower sees the leader's last commit
// within 5–10 ms, not 50–100 ms (followerCommitTimeout).
func TestFollowersLearnCommitsPromptly(t *testing.T) {
	for _, scale := range []float64{1, 0.2, 2} {
		c := &Config{RaftTimeoutScale: scale, Logger: hclog.NewNullLogger()}
		rc := c.raftConfig("s1")
		want := max(time.Duration(float64(5*time.Millisecond)*scale), 5*time.Millisecond)
		if rc.CommitTimeout != want {
			t.Errorf("scale %v: CommitTimeout %v, want %v", scale, rc.CommitTimeout, want)
		}
		if rc.CommitTimeout >= rc.HeartbeatTimeout/10 {
			t.Errorf("scale %v: CommitTimeout %v is not well under the heartbeat interval (%v)", scale, rc.CommitTimeout, rc.HeartbeatTimeout/10)
		}
	}
}
