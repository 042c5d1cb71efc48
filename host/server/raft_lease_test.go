package server

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The leader's lease is the whole heartbeat timeout, at any timeout scale,
// and raft takes the configuration.
func TestLeaderLeaseIsTheHeartbeatTimeout(t *testing.T) {
	for _, scale := range []float64{1, 0.5, 3} {
		c := &Config{RaftTimeoutScale: scale, Logger: hclog.NewNullLogger()}
		rc := c.raftConfig("s1")
		if rc.LeaderLeaseTimeout != rc.HeartbeatTimeout {
			t.Errorf("scale %v: lease %s, heartbeat timeout %s", scale, rc.LeaderLeaseTimeout, rc.HeartbeatTimeout)
		}
		if rc.LeaderLeaseTimeout <= time.Duration(float64(raft.DefaultConfig().LeaderLeaseTimeout)*scale) {
			t.Errorf("scale %v: lease %s is not longer than raft's default", scale, rc.LeaderLeaseTimeout)
		}
		if err := raft.ValidateConfig(rc); err != nil {
			t.Errorf("scale %v: %v", scale, err)
		}
	}
}
