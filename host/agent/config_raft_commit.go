package agent

import (
	"time"

	"berth.dev/berth/host/server"
)

// checkRaftCommitTimeout refuses a server.raft_commit_timeout raft would
// refuse (under 1ms) or that would leave followers seconds behind an idle
// leader (server.CheckRaftCommitTimeout).
func checkRaftCommitTimeout(d time.Duration) error {
	if err := server.CheckRaftCommitTimeout(d); err != nil {
		return invalidf("%v", err)
	}
	return nil
}
