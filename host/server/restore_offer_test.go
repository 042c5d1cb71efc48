package server

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/testutil"
)

// An operator's restore is checked by the followers while the leader
// checks it, so raft's install of it on a follower swaps in the store
// already read instead of decoding the state then.
func TestFollowersInstallTheOfferedRestoreWithoutDecoding(t *testing.T) {
	var mu sync.Mutex
	logs := map[string]*lockedBuffer{}
	tc := newTestCluster(t, 3, func(c *testConfig) {
		buf := &lockedBuffer{}
		mu.Lock()
		logs[c.Name] = buf
		mu.Unlock()
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: c.Name, Level: hclog.Info, Output: buf})
	})
	leader := tc.waitLeader()
	kept, dropped := testNode("kept"), testNode("dropped")
	if _, err := tc.register(leader, kept); err != nil {
		t.Fatal(err)
	}
	snap := saveSnapshot(t, tc, leader)
	if _, err := tc.register(leader, dropped); err != nil {
		t.Fatal(err)
	}
	if err := restoreSnapshot(tc, leader, snap); err != nil {
		t.Fatalf("restore: %v", err)
	}
	for _, f := range tc.followers(leader) {
		var restores []string
		testutil.WaitFor(t, 10*time.Second, func() error {
			mu.Lock()
			out := logs[f.cfg.Name].String()
			mu.Unlock()
			restores = nil
			for line := range strings.Lines(out) {
				if strings.Contains(line, "restored state from snapshot") {
					restores = append(restores, strings.TrimSpace(line))
				}
			}
			if len(restores) == 0 {
				return fmt.Errorf("%s has not installed the snapshot", f.cfg.Name)
			}
			return nil
		})
		if len(restores) != 1 || !strings.Contains(restores[0], "checked_before=true") {
			t.Fatalf("%s's FSM restores: %q; want one, of the store its check of the offer read (checked_before=true)", f.cfg.Name, restores)
		}
		if n, _ := f.State().NodeByID(nil, dropped.GetId()); n != nil {
			t.Fatalf("%s holds the node registered after the snapshot", f.cfg.Name)
		}
		if n, _ := f.State().NodeByID(nil, kept.GetId()); n == nil {
			t.Fatalf("%s lost the snapshot's node", f.cfg.Name)
		}
	}
}
