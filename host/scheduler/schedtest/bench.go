package schedtest

import (
	"fmt"

	"berth.dev/berth/host/scheduler"
)

// Throughput is one measured run of the scheduler over Cluster.
type Throughput struct {
	Nodes, Placements int
	// Nanos is the time Schedule took, by the caller's clock.
	Nanos int64
}

// PerSecond is placements per second.
func (t Throughput) PerSecond() float64 {
	if t.Nanos <= 0 {
		return 0
	}
	return float64(t.Placements) / (float64(t.Nanos) / 1e9)
}

// PerPlacementNanos is the mean time of one placement.
func (t Throughput) PerPlacementNanos() float64 {
	if t.Placements == 0 {
		return 0
	}
	return float64(t.Nanos) / float64(t.Placements)
}

// MeasurePlace schedules a count-alloc service job over nodes nodes
// (Cluster with 4000 MHz and 8192 MB each) and times the Schedule call
// with clock (unix nanoseconds; the caller passes the real clock, this
// package may not read one). It fails if not every alloc was placed, so a
// fast wrong answer is not reported as throughput.
func MeasurePlace(nodes, count int, clock func() int64) (Throughput, error) {
	st, eval := Cluster(nodes, int32(count), 4000, 8192)
	opts := scheduler.Options{Now: clock(), NewID: Seq("bench")}
	start := clock()
	res, err := scheduler.Schedule(st, eval, opts)
	elapsed := clock() - start
	if err != nil {
		return Throughput{}, err
	}
	if got := len(res.Plan.GetAllocs()); got != count {
		return Throughput{}, fmt.Errorf("scheduler placed %d of %d allocs over %d nodes", got, count, nodes)
	}
	return Throughput{Nodes: nodes, Placements: count, Nanos: elapsed}, nil
}
