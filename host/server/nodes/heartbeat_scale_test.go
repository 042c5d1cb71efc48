package nodes

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
)

func TestScaledTTL(t *testing.T) {
	for _, c := range []struct {
		perSecond float64
		n         int
		want      time.Duration
	}{
		{50, 0, 10 * time.Second},
		{50, 500, 10 * time.Second},
		{50, 1000, 20 * time.Second},
		{50, 10000, 200 * time.Second},
		{0, 10000, 10 * time.Second}, // not scaled
		{2.5, 30, 12 * time.Second},
	} {
		if got := ScaledTTL(10*time.Second, c.perSecond, c.n); got != c.want {
			t.Errorf("ScaledTTL(10s, %v, %d) = %s, want %s", c.perSecond, c.n, got, c.want)
		}
	}
}

// The TTL nodes are told grows with the nodes whose timers run, so the
// leader's heartbeat load stays bounded (the node simulator found 10,000
// nodes at a fixed 10 s TTL asking it for ~3,400 heartbeats a second).
func TestTTLGrowsWithTheNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := NewHeartbeater(newFakeNodes(), clock.Real{}, testTTL, testGrace, testutil.Logger(t)).WithMaxPerSecond(1)
		h.Start()
		defer h.Close()
		n := int(testTTL/time.Second) * 3
		for i := range n {
			h.Reset(fmt.Sprintf("n%d", i), h.TTL())
		}
		if got, want := h.TTL(), time.Duration(n)*time.Second; got != want {
			t.Fatalf("TTL with %d nodes at 1/s: %s, want %s", n, got, want)
		}
	})
}

// A new leader arms the timers of the nodes it finds ready with the TTL
// they were told (scaled to their number) and the grace: a node told 30 s
// is not marked down after the base TTL and the grace.
func TestNewLeaderArmsTheScaledTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ids []string
		n := int(testTTL/time.Second) * 3
		for i := range n {
			ids = append(ids, fmt.Sprintf("n%d", i))
		}
		nodes := newFakeNodes(ids...)
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t)).WithMaxPerSecond(1)
		start := time.Now()
		h.Start()
		defer h.Close()
		scaled := time.Duration(n) * time.Second
		time.Sleep(testTTL + testGrace + time.Second)
		synctest.Wait()
		if downs := nodes.downTimes(); len(downs) != 0 {
			t.Fatalf("nodes told %s marked down after %s: %v", scaled, testTTL+testGrace+time.Second, downs)
		}
		time.Sleep(scaled - testTTL)
		synctest.Wait()
		downs := nodes.downTimes()
		if len(downs) != n || !downs[0].Equal(start.Add(scaled+testGrace)) {
			t.Fatalf("%d down-markings (first %v), want %d at %v", len(downs), downs, n, start.Add(scaled+testGrace))
		}
	})
}
