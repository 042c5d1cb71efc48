package nodes

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
)

// Heartbeats handled are counted, and so is a node marked down for missing
// them.
func TestHeartbeatMetrics(t *testing.T) {
	value := func(name string) float64 { return testutil.MetricValue(t, name, nil, Metrics()...) }
	received, missed := value("berth_heartbeats_received_total"), value("berth_heartbeats_missed_total")
	synctest.Test(t, func(t *testing.T) {
		nodes := newFakeNodes("n1", "n2")
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t))
		h.Start()
		defer h.Close()
		for range 3 {
			time.Sleep(testTTL / 2)
			if err := h.Heartbeat(context.Background(), "n1", testTTL); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 1 {
			t.Fatalf("down-markings %v, want one (n2)", downs)
		}
	})
	if got := value("berth_heartbeats_received_total") - received; got != 3 {
		t.Errorf("heartbeats received grew by %v, want 3", got)
	}
	if got := value("berth_heartbeats_missed_total") - missed; got != 1 {
		t.Errorf("heartbeats missed grew by %v, want 1", got)
	}
}
