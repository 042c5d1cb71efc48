package server

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// raft's CommitTimeout is the configured raft_commit_timeout, or
// DefaultRaftCommitTimeout scaled up like raft's other timeouts but never
// down; one out of bounds is refused with the key named.
func TestRaftCommitTimeoutSetting(t *testing.T) {
	for _, tc := range []struct {
		set   time.Duration
		scale float64
		want  time.Duration
	}{
		{0, 1, DefaultRaftCommitTimeout},
		{0, 0.2, DefaultRaftCommitTimeout},
		{0, 2, 2 * DefaultRaftCommitTimeout},
		{50 * time.Millisecond, 1, 50 * time.Millisecond},
		{50 * time.Millisecond, 0.2, 50 * time.Millisecond},
	} {
		c := &Config{RaftCommitTimeout: tc.set, RaftTimeoutScale: tc.scale, Logger: hclog.NewNullLogger()}
		if got := c.raftConfig("s1").CommitTimeout; got != tc.want {
			t.Errorf("set %v scale %v: CommitTimeout %v, want %v", tc.set, tc.scale, got, tc.want)
		}
	}
	for _, d := range []time.Duration{time.Microsecond, -time.Second, 2 * time.Second} {
		c := (&Config{RPCAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2", RaftCommitTimeout: d}).withDefaults()
		err := c.validate(options{})
		if err == nil || !strings.Contains(err.Error(), "raft_commit_timeout must be between 1ms and 1s, got "+d.String()) {
			t.Errorf("raft_commit_timeout %v: %v", d, err)
		}
	}
}
