package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
)

// TestMemberBelowGateLoggedAndBackedOff: a follower restarted below the
// in-apply gates (a downgrade in place) stays a raft voter, which the Join
// refusal cannot undo; the leader says so at Error, naming the server, its
// version and the gates, once a minute per server, and the follower
// recognises the refusal that reached it over gRPC (not only the leader's
// own ErrServerBelowGate): it logs it at Error, naming the gates, and backs
// off rather than sending a Join every second at Debug.
func TestMemberBelowGateLoggedAndBackedOff(t *testing.T) {
	var logs lockedBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Error})
	tc := newTestCluster(t, 3, withVersion(version.Version), func(c *testConfig) {
		c.DataDir = t.TempDir()
		c.Logger = logger.Named(c.Name)
	})
	leader := tc.waitLeader()
	for _, s := range tc.servers {
		waitRecorded(t, leader, s.id, version.Version)
	}
	f := tc.restart(tc.followers(leader)[0], func(c *Config) { c.Version = "0.1.0-dev.3" })
	tc.waitLeader()
	leaderLines := func() int {
		n := 0
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "a raft member runs a version below the gates") && strings.Contains(l, "id="+f.id) {
				for _, want := range []string{"version=0.1.0-dev.3", "pluginInstancesSince", "snapshot taken before the upgrade"} {
					if !strings.Contains(l, want) {
						t.Errorf("leader's line %q does not say %q", l, want)
					}
				}
				n++
			}
		}
		return n
	}

	d := newDiscovery(f)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if err := d.registerRound(ctx10s(t)); err != nil {
			return err
		}
		if d.belowGateTries != 1 {
			return fmt.Errorf("registerRound tried %d times below the gate, want 1", d.belowGateTries)
		}
		return nil
	})
	said := false
	for _, l := range strings.Split(logs.String(), "\n") {
		said = said || strings.Contains(l, "this server is not recorded: its version is below a gate") && strings.Contains(l, "pluginInstancesSince")
	}
	if !said {
		t.Errorf("follower's log %q: want an Error naming the gates", logs.String())
	}
	// Backed off: the next rounds, before the wait, send no Join.
	for range 3 {
		if err := d.registerRound(ctx10s(t)); err != nil || d.belowGateTries != 1 {
			t.Fatalf("a round within the back-off: %v, tries %d, want none", err, d.belowGateTries)
		}
	}
	if n := leaderLines(); n != 1 {
		t.Fatalf("leader logged the member below the gates %d times, want once within a minute", n)
	}
	tc.clock.Advance(memberBelowGateEvery)
	testutil.WaitFor(t, 10*time.Second, func() error {
		_ = d.registerRound(ctx10s(t))
		if n := leaderLines(); n != 2 {
			return fmt.Errorf("leader logged the member %d times after a minute, want twice", n)
		}
		return nil
	})
	if d.belowGateTries != 2 {
		t.Errorf("tries after the wait: %d, want 2", d.belowGateTries)
	}
}
