package execdriver

import (
	"context"
	"iter"
	"time"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/sdk/driverpb"
)

// minStatsInterval keeps a careless caller from reading cgroups in a loop.
const minStatsInterval = 100 * time.Millisecond

// TaskStats implements sdk.StatsDriver: CPU time, memory and processes of
// the task's cgroup (everything in its namespace, the init included),
// sampled every interval until the task exits.
func (d *Driver) TaskStats(ctx context.Context, taskID string, interval time.Duration) iter.Seq2[*driverpb.TaskResourceUsage, error] {
	return func(yield func(*driverpb.TaskResourceUsage, error) bool) {
		_, proc, err := d.Get(taskID)
		if err != nil {
			yield(nil, err)
			return
		}
		tick := time.NewTicker(max(interval, minStatsInterval))
		defer tick.Stop()
		for {
			if taskexec.Exited(proc) {
				return
			}
			u, err := d.cgroups.stat(taskID)
			if err != nil {
				yield(nil, err)
				return
			}
			usage := &driverpb.TaskResourceUsage{
				TaskId: taskID, Timestamp: time.Now().UnixNano(),
				CpuUserNanos: u.cpuUser, CpuSystemNanos: u.cpuSystem,
				MemoryRssBytes: u.memoryRSS, MemoryUsageBytes: u.memoryUsage,
				Processes: uint32(u.processes),
			}
			if !yield(usage, nil) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-proc.Done():
				return
			case <-tick.C:
			}
		}
	}
}
