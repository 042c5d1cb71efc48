package execdriver

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk/driverpb"
)

// BenchmarkCgroupJoinFloor is a floor of an exec task's start: the
// kernel's cost of putting a process in a task's cgroups, as the executor
// puts the init (one cgroup.procs write per v1 controller, or one on v2).
// A move takes cgroup_threadgroup_rwsem for writing, which waits for an
// RCU grace period, and blocks every fork on the host meanwhile; writes
// back to back share one. Reported: the median of one join (every
// controller) of a sleeping process, moving it into a fresh task-shaped
// cgroup each time, and the median of a single write.
func BenchmarkCgroupJoinFloor(b *testing.B) {
	testutil.RequireRoot(b, "creating cgroups")
	c, err := detectCgroups()
	if err != nil {
		testutil.Unavailable(b, "no cgroups: %v", err)
	}
	home, err := c.createAt(cgroupParent+"/bench-floor-home", &driverpb.Resources{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.removeOnce(cgroupParent + "/bench-floor-home")
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	pid := []byte(strconv.Itoa(sleeper.Process.Pid))
	var creates, joins, writes []time.Duration
	for i := range b.N {
		group := cgroupParent + "/bench-floor-" + strconv.Itoa(i)
		created := time.Now()
		procs, err := c.createAt(group, &driverpb.Resources{MemoryBytes: 64 << 20, CpuShares: 100})
		if err != nil {
			b.Fatal(err)
		}
		removed := false
		// After the defers above: the sleeper, killed, has left it.
		b.Cleanup(func() {
			if !removed {
				c.removeOnce(group)
			}
		})
		creates = append(creates, time.Since(created))
		begin := time.Now()
		for _, p := range procs {
			w := time.Now()
			if err := os.WriteFile(p, pid, 0); err != nil {
				b.Fatal(err)
			}
			writes = append(writes, time.Since(w))
		}
		joins = append(joins, time.Since(begin))
		for _, p := range home { // back out, untimed, so the group can go
			if err := os.WriteFile(p, pid, 0); err != nil {
				b.Fatal(err)
			}
		}
		if err := c.removeOnce(group); err != nil {
			b.Fatal(err)
		}
		removed = true
		time.Sleep(20 * time.Millisecond) // apart, as starts are: no shared grace period
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(creates), "create-ms")
	b.ReportMetric(median(joins), "join-ms")
	b.ReportMetric(median(writes), "write-ms")
}
