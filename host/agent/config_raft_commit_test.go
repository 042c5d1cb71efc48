package agent

import (
	"strings"
	"testing"
	"time"

	"berth.dev/berth/host/server"
)

// server.raft_commit_timeout: 5ms unless set, read from a file, and
// refused out of 1ms-1s with the key and the bounds named.
func TestRaftCommitTimeoutKey(t *testing.T) {
	if got := DefaultConfig().Server.RaftCommitTimeout; got != server.DefaultRaftCommitTimeout {
		t.Fatalf("default %v, want %v", got, server.DefaultRaftCommitTimeout)
	}
	parsed, err := ParseConfig("agent.hcl", []byte("server {\n  raft_commit_timeout = \"50ms\"\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := validBase().Merge(parsed)
	if c.Server.RaftCommitTimeout != 50*time.Millisecond {
		t.Fatalf("parsed %v, want 50ms", c.Server.RaftCommitTimeout)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("50ms refused: %v", err)
	}
	for _, src := range []string{`"500us"`, `"2s"`, `"0s"`} {
		parsed, err := ParseConfig("agent.hcl", []byte("server {\n  raft_commit_timeout = "+src+"\n}\n"))
		if err == nil {
			err = validBase().Merge(parsed).Validate()
		}
		if err == nil || !strings.Contains(err.Error(), "server.raft_commit_timeout: must be between 1ms and 1s, got ") {
			t.Errorf("raft_commit_timeout = %s: %v, want refused naming the key and bounds", src, err)
		}
	}
}
