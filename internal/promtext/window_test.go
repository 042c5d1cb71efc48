package promtext

import (
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
)

// fakeNow sets the package's clock for a test.
func fakeNow(t *testing.T) *time.Time {
	clock := time.Unix(1_700_000_000, 0)
	now = func() time.Time { return clock }
	t.Cleanup(func() { now = time.Now })
	return &clock
}

// A sink's series stays however long it goes without an update, with its
// value, as berth's go-metrics sink (Expiration 0) kept it: a rare counter
// (raft's leader changes) that left the answer would come back at its last
// increment, not monotonic.
func TestSinkKeepsSeriesNotUpdatedForAMinute(t *testing.T) {
	clock := fakeNow(t)
	s := NewSink()
	s.SetGauge([]string{"g"}, 3)
	s.IncrCounter([]string{"c"}, 2)
	s.AddSample([]string{"s"}, 5)
	values := func() (g, c float64, n uint64, sum float64) {
		t.Helper()
		fs, err := Gather(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 3 {
			t.Fatalf("%d families, want 3 (g, c, s)", len(fs))
		}
		for _, f := range fs {
			m := f.GetMetric()[0]
			switch f.GetName() {
			case "g":
				g = m.GetGauge().GetValue()
			case "c":
				c = m.GetCounter().GetValue()
			case "s":
				n, sum = m.GetSummary().GetSampleCount(), m.GetSummary().GetSampleSum()
			}
		}
		return
	}
	for _, d := range []time.Duration{61 * time.Second, time.Hour} {
		*clock = clock.Add(d)
		if g, c, n, sum := values(); g != 3 || c != 2 || n != 1 || sum != 5 {
			t.Fatalf("after %v more: gauge %v (want 3), counter %v (want 2), sample count %d sum %v (want 1, 5)", d, g, c, n, sum)
		}
	}
	s.IncrCounter([]string{"c"}, 1)
	if _, c, _, _ := values(); c != 3 {
		t.Fatalf("counter %v after one more, want 3", c)
	}
}

// A new gauge is stored with its value: a scrape between its publication
// and the call's return serves the value set, never a 0 it was not set to.
func TestSinkNewGaugeIsPublishedWithItsValue(t *testing.T) {
	s := NewSink()
	var seen []float64
	afterPublish = func() {
		fs, err := Gather(s)
		if err != nil {
			t.Error(err)
		}
		for _, f := range fs {
			if f.GetName() == "g" {
				seen = append(seen, f.GetMetric()[0].GetGauge().GetValue())
			}
		}
	}
	t.Cleanup(func() { afterPublish = nil })
	s.SetGauge([]string{"g"}, 7)
	if len(seen) != 1 || seen[0] != 7 {
		t.Fatalf("a scrape right after the gauge was published served %v, want [7]", seen)
	}
}

// A summary's quantiles cover the last 10 s; its count and sum everything.
func TestSummaryQuantilesForgetOldObservations(t *testing.T) {
	clock := fakeNow(t)
	s := newSummary("s", "s", nil)
	for i := range 100 {
		s.Observe(float64(i))
	}
	quantiles := func() (q50 float64, count uint64) {
		fs, err := Gather(s)
		if err != nil {
			t.Fatal(err)
		}
		m := fs[0].GetMetric()[0].GetSummary()
		return m.GetQuantile()[0].GetValue(), m.GetSampleCount()
	}
	if q, n := quantiles(); q < 45 || q > 55 || n != 100 {
		t.Fatalf("median %v of %d", q, n)
	}
	*clock = clock.Add(9 * time.Second)
	if q, _ := quantiles(); math.IsNaN(q) {
		t.Fatal("observations 9 s old are forgotten")
	}
	*clock = clock.Add(2 * time.Second)
	if q, n := quantiles(); !math.IsNaN(q) || n != 100 {
		t.Fatalf("after 11 s: median %v (want NaN), count %d (want 100)", q, n)
	}
	s.Observe(1000)
	if q, n := quantiles(); q != 1000 || n != 101 {
		t.Fatalf("median %v of %d after a new observation", q, n)
	}
}

// The sink is used from raft's goroutines while a scrape gathers it.
func TestSinkConcurrentUse(t *testing.T) {
	s := NewSink()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 300 {
				s.IncrCounter([]string{"raft", "apply"}, 1)
				s.AddSample([]string{"raft", "commitTime"}, float32(i))
				s.SetGaugeWithLabels([]string{"raft", "peers"}, float32(w), []metrics.Label{{Name: "w", Value: strconv.Itoa(w % 2)}})
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			if _, err := Gather(s); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	fs, err := Gather(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		switch f.GetName() {
		case "raft_apply":
			if v := f.GetMetric()[0].GetCounter().GetValue(); v != 1200 {
				t.Errorf("raft_apply = %v, want 1200", v)
			}
		case "raft_commitTime":
			if n := f.GetMetric()[0].GetSummary().GetSampleCount(); n != 1200 {
				t.Errorf("raft_commitTime count = %d, want 1200", n)
			}
		case "raft_peers":
			if len(f.GetMetric()) != 2 {
				t.Errorf("raft_peers series %d, want 2", len(f.GetMetric()))
			}
		}
	}
	if len(fs) != 3 {
		t.Fatalf("%d families, want 3", len(fs))
	}
}
