package rawexec

import (
	"context"
	"iter"
	"os"
	"time"

	"berth.dev/berth/builtin/drivers/internal/taskexec"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/procfs"
)

// Linux reports CPU time in clock ticks of USER_HZ, 100 on every
// architecture Go supports.
const ticksPerSecond = 100

// minStatsInterval keeps a careless caller from scanning /proc in a loop.
const minStatsInterval = 100 * time.Millisecond

// TaskStats implements sdk.StatsDriver: CPU time and resident memory summed
// over the task's process group, sampled every interval until the task
// exits.
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
			usage, err := groupUsage(proc.Pid())
			if err != nil {
				yield(nil, err)
				return
			}
			usage.TaskId = taskID
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

func groupUsage(pgid int) (*driverpb.TaskResourceUsage, error) {
	procs, err := procfs.Group(pgid)
	if err != nil {
		return nil, err
	}
	u := &driverpb.TaskResourceUsage{Timestamp: time.Now().UnixNano(), Processes: uint32(len(procs))}
	page := uint64(os.Getpagesize())
	for _, p := range procs {
		u.CpuUserNanos += p.UserTicks * uint64(time.Second/ticksPerSecond)
		u.CpuSystemNanos += p.SystemTicks * uint64(time.Second/ticksPerSecond)
		if p.RSSPages > 0 {
			u.MemoryRssBytes += uint64(p.RSSPages) * page
		}
	}
	return u, nil
}
