package server

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The leader reads and checks an operator's upload before raft's Restore;
// raft's Restore then swaps in the store that check read instead of
// decoding the same bytes again while raft's leader loop waits.
func TestOperatorRestoreDecodesTheUploadOnce(t *testing.T) {
	var logs lockedBuffer
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.Logger = hclog.New(&hclog.LoggerOptions{
			Name: "s1", Level: hclog.Info,
			Output: &logs,
		})
	})
	s := tc.servers[0]
	kept, dropped := testNode("kept"), testNode("dropped")
	if _, err := tc.register(s, kept); err != nil {
		t.Fatal(err)
	}
	snap := saveSnapshot(t, tc, s)
	if _, err := tc.register(s, dropped); err != nil {
		t.Fatal(err)
	}
	if err := restoreSnapshot(tc, s, snap); err != nil {
		t.Fatalf("restore: %v", err)
	}
	var restores []string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "restored state from snapshot") {
			restores = append(restores, line)
		}
	}
	if len(restores) != 1 || !strings.Contains(restores[0], "checked_before=true") {
		t.Fatalf("the FSM's restores during the operator restore: %q; want one, of the store checked before (checked_before=true)", restores)
	}
	if n, _ := s.State().NodeByID(nil, dropped.GetId()); n != nil {
		t.Fatal("the restored state holds a node registered after the snapshot")
	}
	if n, _ := s.State().NodeByID(nil, kept.GetId()); n == nil {
		t.Fatal("the restored state lost the snapshot's node")
	}
}
