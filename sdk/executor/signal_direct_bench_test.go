package executor

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkIsolatedStop measures an isolated task's stop, a shell trapping
// TERM in its namespaces, from the signal to its exit known (the init's
// reaping, the namespace's end, the executor's report): with the signal
// sent to the task's own group (Signal) and, alternately run by run in
// the same process, through the init's group as a handle without Group is
// (the init forwards it). Medians reported as metrics; the machine's
// drift hits both alike.
func BenchmarkIsolatedStop(b *testing.B) {
	requireRoot(b)
	var direct, viaInit []time.Duration
	for i := range b.N {
		for _, through := range []bool{i%2 == 0, i%2 != 0} {
			dir := b.TempDir()
			ready, _ := trapFifos(b, dir)
			p := startT(b, isoSpec(b, dir, trapScript))
			awaitLine(b, ready)
			begin := time.Now()
			var err error
			if through {
				err = p.State().Task.SignalGroup(syscall.SIGTERM)
			} else {
				err = p.Signal(syscall.SIGTERM)
			}
			if err != nil {
				b.Fatal(err)
			}
			if e := waitT(b, p); e.ExitCode != 7 {
				b.Fatalf("exit %+v, want 7 from the trap", e)
			}
			if through {
				viaInit = append(viaInit, time.Since(begin))
			} else {
				direct = append(direct, time.Since(begin))
			}
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(direct), "direct-ms")
	b.ReportMetric(median(viaInit), "via-init-ms")
	b.ReportMetric(float64(len(direct)), "runs-each")
}
