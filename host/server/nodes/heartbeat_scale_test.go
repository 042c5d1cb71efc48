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
		{50, 140, 10 * time.Second}, // 9.6 s
		{50, 350, 24 * time.Second},
		{50, 7000, 480 * time.Second},
		{0, 10000, 10 * time.Second}, // not scaled
		{2.5, 35, 48 * time.Second},
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
		n := 7
		for i := range n {
			h.Reset(fmt.Sprintf("n%d", i), h.TTL())
		}
		if got, want := h.TTL(), 24*time.Second; got != want {
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
		n := 7
		for i := range n {
			ids = append(ids, fmt.Sprintf("n%d", i))
		}
		nodes := newFakeNodes(ids...)
		h := NewHeartbeater(nodes, clock.Real{}, testTTL, testGrace, testutil.Logger(t)).WithMaxPerSecond(1)
		start := time.Now()
		h.Start()
		defer h.Close()
		scaled := 24 * time.Second
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

// Clients heartbeat every TTL/3 less up to a quarter of that: at the
// scaled TTL, n nodes send about perSecond heartbeats a second, not 3.4
// times as many.
func TestScaledTTLHoldsTheRateAtTheClientsCadence(t *testing.T) {
	const n, perSecond = 10000, 50.0
	ttl := ScaledTTL(testTTL, perSecond, n)
	meanInterval := ttl / 3 * 7 / 8 // host/client's interval, on average
	if rate := float64(n) / meanInterval.Seconds(); rate > perSecond*1.001 || rate < perSecond*0.99 {
		t.Fatalf("%d nodes at TTL %s heartbeat %.1f times a second, want %v", n, ttl, rate, perSecond)
	}
}

// A new leader answers the re-homing nodes before its barrier passed and
// its timers start: it tells them the TTL scaled over the ready nodes in
// state, not the configured one, which would bring them back ~3.4 times
// as often just when it is busiest.
func TestTTLBeforeStartIsScaledOverTheReadyNodes(t *testing.T) {
	var ids []string
	for i := range 7 {
		ids = append(ids, fmt.Sprintf("n%d", i))
	}
	h := NewHeartbeater(newFakeNodes(ids...), clock.Real{}, testTTL, testGrace, testutil.Logger(t)).WithMaxPerSecond(1)
	defer h.Close()
	if got, want := h.TTL(), 24*time.Second; got != want {
		t.Fatalf("TTL before Start with 7 ready nodes at 1/s: %s, want %s", got, want)
	}
}
