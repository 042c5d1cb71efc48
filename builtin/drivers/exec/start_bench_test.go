package execdriver_test

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk/driverpb"
)

// BenchmarkStartPath measures an exec task's start as a job's drives it,
// over the in-process plugin: StartTask called → returned (the task's
// cgroup created and joined, the executor — the standby when one is
// ready — the namespace init's re-execution and its root, the task
// forked), the median reported as a metric. The task has a memory limit
// and CPU shares, so its init joins real cgroups. Each task is killed and
// its cgroup's removal waited for outside the timed step.
func BenchmarkStartPath(b *testing.B) {
	testutil.RequireRoot(b, "exec isolates tasks with namespaces, mounts and cgroups")
	d := client(b)
	var started []time.Duration
	for i := range b.N {
		cfg := taskCfg(b, "start-"+strconv.Itoa(i), sh(`exec sleep 600`))
		cfg.Resources = &driverpb.Resources{MemoryBytes: 64 << 20, CpuShares: 100}
		begin := time.Now()
		if _, err := d.StartTask(ctxT(b), cfg); err != nil {
			b.Fatal(err)
		}
		started = append(started, time.Since(begin))
		if err := d.DestroyTask(ctxT(b), cfg.GetId(), true); err != nil {
			b.Fatal(err)
		}
		for _, dir := range cgroupDirs(cfg.GetId()) {
			waitFor(b, "cgroup "+dir+" removed", func() bool { _, err := os.Stat(dir); return err != nil })
		}
	}
	slices.Sort(started)
	b.ReportMetric(float64(started[len(started)/2].Microseconds())/1000, "start-ms")
}
