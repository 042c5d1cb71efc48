package promtext

import (
	"math"
	"testing"
	"time"
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
