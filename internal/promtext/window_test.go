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

func family(t *testing.T, c Collector, name string) (found bool, fams int) {
	t.Helper()
	fs, err := Gather(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.GetName() == name {
			found = true
		}
	}
	return found, len(fs)
}

// A sink's series not updated for a minute leaves the answer (raft's
// per-peer series of a removed server do not stay forever).
func TestSinkDropsSeriesNotUpdatedForAMinute(t *testing.T) {
	clock := fakeNow(t)
	s := NewSink()
	s.SetGauge([]string{"g"}, 1)
	s.IncrCounter([]string{"c"}, 1)
	s.AddSample([]string{"s"}, 1)
	*clock = clock.Add(59 * time.Second)
	s.SetGauge([]string{"g"}, 2)
	if _, n := family(t, s, ""); n != 3 {
		t.Fatalf("%d families after 59 s, want 3", n)
	}
	*clock = clock.Add(2 * time.Second)
	if found, n := family(t, s, "g"); !found || n != 1 {
		t.Fatalf("after 61 s: gauge found %t, %d families; want only the gauge updated at 59 s", found, n)
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
