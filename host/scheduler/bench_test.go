package scheduler_test

import (
	"testing"
	"time"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// BenchmarkPlace5000On1000 is the throughput target: 5,000 allocs
// of one job over 1,000 nodes, at least 1,000 placements/s.
func BenchmarkPlace5000On1000(b *testing.B) {
	st, eval := schedtest.Cluster(1000, 5000, 4000, 8192)
	b.ReportAllocs()
	for b.Loop() {
		res, err := scheduler.Schedule(st, eval, scheduler.Options{Now: 1, NewID: schedtest.Seq("b")})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Plan.GetAllocs()) != 5000 {
			b.Fatalf("placed %d", len(res.Plan.GetAllocs()))
		}
	}
	b.ReportMetric(float64(5000*b.N)/b.Elapsed().Seconds(), "placements/s")
}

// TestMeasurePlace checks the harness make bench uses: it places every
// alloc and reports a rate from the clock it is given.
func TestMeasurePlace(t *testing.T) {
	tick := int64(0)
	clock := func() int64 { tick += 500_000_000; return tick }
	m, err := schedtest.MeasurePlace(50, 200, clock)
	if err != nil {
		t.Fatal(err)
	}
	// Three clock reads: options, start, end: 0.5 s between start and end.
	equal(t, "measurement", []any{m.Placements, m.Nanos, m.PerSecond(), m.PerPlacementNanos()}, []any{200, int64(500_000_000), 400.0, 2_500_000.0})
	if _, err := schedtest.MeasurePlace(1, 1000, func() int64 { return time.Now().UnixNano() }); err == nil {
		t.Error("1000 allocs of 128 MB fit on one 8 GB node?")
	}
}

// BenchmarkSteadyState5000On1000 re-evaluates the same job once its 5,000
// allocs run: the cost of an eval that changes nothing (a node update, a
// blocked eval woken for another job's capacity).
func BenchmarkSteadyState5000On1000(b *testing.B) {
	st, eval := schedtest.Cluster(1000, 5000, 4000, 8192)
	res, err := scheduler.Schedule(st, eval, scheduler.Options{Now: 1, NewID: schedtest.Seq("b")})
	if err != nil {
		b.Fatal(err)
	}
	st.Apply(res.Plan)
	b.ReportAllocs()
	for b.Loop() {
		res, err := scheduler.Schedule(st, eval, scheduler.Options{Now: 2, NewID: schedtest.Seq("c")})
		if err != nil {
			b.Fatal(err)
		}
		if !res.Empty() {
			b.Fatalf("steady state plans %d allocs, %d stops", len(res.Plan.GetAllocs()), len(res.Plan.GetStops()))
		}
	}
}

// BenchmarkSystem1000 places a system job on 1,000 nodes.
func BenchmarkSystem1000(b *testing.B) {
	st, _ := schedtest.Cluster(1000, 0, 4000, 8192)
	job := schedtest.Job("sys", pb.JobType_JOB_TYPE_SYSTEM, 0)
	st.AddJob(job)
	eval := schedtest.Eval("sys-eval", job)
	b.ReportAllocs()
	for b.Loop() {
		res, err := scheduler.Schedule(st, eval, scheduler.Options{Now: 1, NewID: schedtest.Seq("s")})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Plan.GetAllocs()) != 1000 {
			b.Fatalf("placed %d", len(res.Plan.GetAllocs()))
		}
	}
}
