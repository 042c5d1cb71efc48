package ctrdriver

import (
	"context"
	"fmt"
	"iter"
	"time"

	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/typeurl/v2"

	"berth.dev/berth/sdk/driverpb"
)

// minStatsInterval keeps a careless caller from asking containerd in a loop.
const minStatsInterval = 100 * time.Millisecond

// usage is what the driver reads from a container's cgroup.
type usage struct {
	cpuUser, cpuSystem     uint64 // nanoseconds
	memoryRSS, memoryUsage uint64
	processes              uint64
	oomKills               uint64
}

// metricsOf reads the container's cgroup through containerd (v1 or v2).
func metricsOf(ctx context.Context, proc client.Task) (usage, error) {
	m, err := proc.Metrics(ctx)
	if err != nil {
		return usage{}, err
	}
	data, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return usage{}, fmt.Errorf("decode metrics: %w", err)
	}
	switch st := data.(type) {
	case *v1.Metrics:
		return usage{
			cpuUser: st.GetCPU().GetUsage().GetUser(), cpuSystem: st.GetCPU().GetUsage().GetKernel(),
			memoryRSS: st.GetMemory().GetRSS(), memoryUsage: st.GetMemory().GetUsage().GetUsage(),
			processes: st.GetPids().GetCurrent(), oomKills: st.GetMemoryOomControl().GetOomKill(),
		}, nil
	case *v2.Metrics:
		return usage{
			cpuUser: st.GetCPU().GetUserUsec() * 1000, cpuSystem: st.GetCPU().GetSystemUsec() * 1000,
			memoryRSS: st.GetMemory().GetAnon(), memoryUsage: st.GetMemory().GetUsage(),
			processes: st.GetPids().GetCurrent(), oomKills: st.GetMemoryEvents().GetOomKill(),
		}, nil
	}
	return usage{}, fmt.Errorf("unknown metrics type %T", data)
}

// TaskStats implements sdk.StatsDriver: CPU time, memory and processes of
// the container's cgroup, sampled every interval until the task exits.
func (d *Driver) TaskStats(ctx context.Context, taskID string, interval time.Duration) iter.Seq2[*driverpb.TaskResourceUsage, error] {
	return func(yield func(*driverpb.TaskResourceUsage, error) bool) {
		t, err := d.tasks.Get(taskID)
		if err != nil {
			yield(nil, err)
			return
		}
		tick := time.NewTicker(max(interval, minStatsInterval))
		defer tick.Stop()
		for {
			if t.exited() {
				return
			}
			u, err := metricsOf(t.ctx(ctx), t.proc)
			if err != nil {
				if t.exited() {
					return
				}
				yield(nil, fmt.Errorf("task %q: stats of container %s: %w", taskID, t.state.ContainerID, err))
				return
			}
			if !yield(&driverpb.TaskResourceUsage{
				TaskId: taskID, Timestamp: time.Now().UnixNano(),
				CpuUserNanos: u.cpuUser, CpuSystemNanos: u.cpuSystem,
				MemoryRssBytes: u.memoryRSS, MemoryUsageBytes: u.memoryUsage,
				Processes: uint32(u.processes),
			}, nil) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.done:
				return
			case <-tick.C:
			}
		}
	}
}
