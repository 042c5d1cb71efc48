package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/nodes"
	"berth.dev/berth/internal/promtext"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

type fakeStats struct {
	s     *fsm.StorageStats
	nodes map[pb.NodeStatus]int
	err   error
}

func (f fakeStats) StorageStats() (*fsm.StorageStats, error) { return f.s, f.err }
func (f fakeStats) NodeCountsByStatus() (map[pb.NodeStatus]int, error) {
	return f.nodes, f.err
}

func leading() bool { return true }

// The state gauges: every state emitted, zero included; the oldest start
// of a state becomes its age at the scrape; plugins by ID and side.
func TestStateGauges(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &fsm.StorageStats{
		Claims:      []int{0, 1, 0, 3, 0, 0, 0},
		OldestClaim: []int64{0, now.Add(-90 * time.Second).UnixNano(), 0, now.Add(-2 * time.Second).UnixNano(), 0, 0, 0},
		Attachments: []int{0, 1, 2, 0, 0},
		Allocs:      []int{0, 0, 4, 1, 0, 2},
		Plugins:     []fsm.PluginStats{{ID: "ebs", ControllersHealthy: 1, ControllersExpected: 2, NodesHealthy: 3, NodesExpected: 3}},
	}
	nodes := map[pb.NodeStatus]int{pb.NodeStatus_NODE_STATUS_READY: 2, pb.NodeStatus_NODE_STATUS_DOWN: 1}
	c := stateCollector{state: fakeStats{s: s, nodes: nodes}, leader: leading, now: func() time.Time { return now }}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"berth_volume_claims", map[string]string{"state": "reserved"}, 1},
		{"berth_volume_claims", map[string]string{"state": "in-use"}, 3},
		{"berth_volume_claims", map[string]string{"state": "node-detached"}, 0},
		{"berth_volume_claim_state_max_age_seconds", map[string]string{"state": "reserved"}, 90},
		{"berth_volume_claim_state_max_age_seconds", map[string]string{"state": "in-use"}, 2},
		{"berth_volume_claim_state_max_age_seconds", map[string]string{"state": "ready"}, 0},
		{"berth_volume_attachments", map[string]string{"state": "attaching"}, 1},
		{"berth_volume_attachments", map[string]string{"state": "attached"}, 2},
		{"berth_volume_attachments", map[string]string{"state": "detaching"}, 0},
		{"berth_allocs", map[string]string{"client_status": "running"}, 4},
		{"berth_allocs", map[string]string{"client_status": "complete"}, 1},
		{"berth_allocs", map[string]string{"client_status": "lost"}, 2},
		{"berth_csi_plugin_instances_healthy", map[string]string{"plugin_id": "ebs", "type": "controller"}, 1},
		{"berth_csi_plugin_instances_expected", map[string]string{"plugin_id": "ebs", "type": "controller"}, 2},
		{"berth_csi_plugin_instances_healthy", map[string]string{"plugin_id": "ebs", "type": "node"}, 3},
		{"berth_nodes", map[string]string{"status": "ready"}, 2},
		{"berth_nodes", map[string]string{"status": "down"}, 1},
	} {
		if got := testutil.MetricValue(t, tc.name, tc.labels, c); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	// Every state is a series of its own: 5 claim states (reserved to
	// node-detached) × 2 families, 3 attachment states, 5 alloc statuses,
	// 4 plugin series, 2 node statuses.
	const want = 5*2 + 3 + 5 + 4 + 2
	if n := seriesCount(t, c); n != want {
		t.Errorf("%d series, want %d", n, want)
	}
}

// seriesCount gathers c and counts its series.
func seriesCount(t *testing.T, c promtext.Collector) int {
	t.Helper()
	fams, err := promtext.Gather(c)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		n += len(f.GetMetric())
	}
	return n
}

// A follower emits none of the state gauges (the leader's are the
// cluster's; a follower's would be counted twice by sum() and may lag),
// and reads no state; the same collector emits them once it leads.
func TestStateGaugesOnlyOnTheLeader(t *testing.T) {
	s := &fsm.StorageStats{Claims: make([]int, 7), OldestClaim: make([]int64, 7), Attachments: make([]int, 5), Allocs: make([]int, 6)}
	lead := false
	reads := 0
	c := stateCollector{state: countingStats{fakeStats{s: s}, &reads}, leader: func() bool { return lead }, now: time.Now}
	if n := seriesCount(t, c); n != 0 || reads != 0 {
		t.Fatalf("a follower emitted %d series after %d state reads, want none", n, reads)
	}
	lead = true
	if n := seriesCount(t, c); n != 5*2+3+5+2 {
		t.Fatalf("the leader emitted %d series, want %d", n, 5*2+3+5+2)
	}
}

type countingStats struct {
	fakeStats
	reads *int
}

func (c countingStats) StorageStats() (*fsm.StorageStats, error) {
	*c.reads++
	return c.fakeStats.StorageStats()
}

// A failed state read fails the scrape rather than serving stale gauges.
func TestStateGaugesReadError(t *testing.T) {
	if _, err := promtext.Gather(stateCollector{state: fakeStats{err: errors.New("boom")}, leader: leading, now: time.Now}); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatal("gather with a failed state read succeeded")
	}
}

// A dev agent (its server the leader) serves the state gauges and the
// registered histograms' families beside the go-metrics ones. The
// heartbeat counter is process-wide (earlier tests' agents add to it):
// the dev agent's node has missed none since this test began.
func TestMetricsServeStateGauges(t *testing.T) {
	missedBefore := testutil.MetricValue(t, "berth_heartbeats_missed_total", nil, nodes.Metrics()...)
	a := testAgent(t)
	testutil.WaitFor(t, 60*time.Second, func() error {
		body := string(do(t, a, "GET", "/v1/metrics", nil).body)
		for _, want := range []string{
			`berth_volume_claims{state="in-use"} 0`,
			`berth_volume_attachments{state="attached"} 0`,
			`berth_csi_plugin_instances_healthy{plugin_id="hostpath",type="node"} 1`,
			`berth_nodes{status="ready"} 1`,
			fmt.Sprintf("berth_heartbeats_missed_total %v\n", missedBefore),
			// Registered (its value depends on when the dev node's first
			// registration met the node-secret gate).
			"\nberth_node_calls_unauthenticated_total ",
		} {
			if !strings.Contains(body, want) {
				return errors.New("metrics lack " + want)
			}
		}
		return nil
	})
}
