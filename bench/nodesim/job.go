package main

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// simJob is a service job of count allocs of one mock task that runs until
// stopped, small enough that every simulated node holds tens of them.
func simJob(id string, count int) (*pb.Job, error) {
	return jobspec.Parse(id+".hcl", fmt.Appendf(nil, `
job %q {
  type = "service"
  group "app" {
    count = %d
    task "app" {
      driver = "mock"
      config {}
      resources {
        cpu    = 10
        memory = 8
      }
    }
  }
}
`, id, count))
}

// runJob registers one job of n allocs and waits, by blocking queries on
// its summary, until every alloc is placed and then running.
func (s *sim) runJob(ctx context.Context, id string, n int) (*jobRun, error) {
	job, err := simJob(id, n)
	if err != nil {
		return nil, err
	}
	leader, err := s.leader(ctx)
	if err != nil {
		return nil, err
	}
	var cpuBefore procStat
	if leader != nil {
		if cpuBefore, err = readProcStat(leader.cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	othersBefore := s.othersCPU(leader)
	byProcBefore := s.cpuByProcess(leader)
	countsBefore, err := s.counts()
	if err != nil {
		return nil, err
	}
	indexBefore := s.lastIndex(ctx)
	start := time.Now()
	if _, err := s.api.Jobs().Register(ctx, job, nil); err != nil {
		return nil, fmt.Errorf("registering job %s: %w", id, err)
	}
	r := &jobRun{Allocs: n}
	var index uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sum, meta, err := s.api.Jobs().Summary(cctx, id, &api.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, s.withLogs(fmt.Errorf("job %s: %w", id, err))
			}
			index = 0
			continue
		}
		index = meta.LastIndex
		g := sum.GetGroups()["app"]
		placed := g.GetPending() + g.GetRunning() + g.GetComplete() + g.GetFailed() + g.GetLost()
		if r.PlacedSeconds == 0 && placed >= int32(n) {
			r.PlacedSeconds = time.Since(start).Seconds()
		}
		if g.GetRunning() >= int32(n) {
			r.RunningSeconds = time.Since(start).Seconds()
			break
		}
		if g.GetFailed()+g.GetLost() > 0 {
			return nil, s.withLogs(fmt.Errorf("job %s: %d allocs failed, %d lost", id, g.GetFailed(), g.GetLost()))
		}
		if ctx.Err() != nil {
			return nil, s.withLogs(fmt.Errorf("job %s: %d of %d allocs placed, %d running: %w", id, placed, n, g.GetRunning(), ctx.Err()))
		}
	}
	countsAfter, err := s.counts()
	if err != nil {
		return nil, err
	}
	r.StartedTasks = countsAfter.started - countsBefore.started
	r.UpdateCalls = countsAfter.calls[pb.ClientAllocs_Update_FullMethodName] - countsBefore.calls[pb.ClientAllocs_Update_FullMethodName]
	r.AllocUpdates, r.AllocUpdatesByStatus = allocUpdates(countsBefore.calls, countsAfter.calls)
	if after := s.lastIndex(ctx); indexBefore > 0 && after > indexBefore {
		r.RaftEntries = after - indexBefore
	}
	if leader != nil {
		after, err := readProcStat(leader.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		r.LeaderCPUSeconds = (after.cpu - cpuBefore.cpu).Seconds()
	}
	othersAfter := s.othersCPU(leader)
	r.FollowersCPUSeconds = (othersAfter.followers - othersBefore.followers).Seconds()
	r.SimCPUSeconds = (othersAfter.sim - othersBefore.sim).Seconds()
	r.ProcessCPUSeconds = cpuSince(byProcBefore, s.cpuByProcess(leader))
	return r, nil
}

// cpuOthers is the CPU time so far of the servers other than the leader
// (those alive) and of the simulator itself.
type cpuOthers struct{ followers, sim time.Duration }

func (s *sim) othersCPU(leader *server) cpuOthers {
	var c cpuOthers
	for _, sv := range s.servers {
		if sv == leader || !sv.alive() {
			continue
		}
		if ps, err := readProcStat(sv.cmd.Process.Pid); err == nil {
			c.followers += ps.cpu
		}
	}
	c.sim = s.simCPU()
	return c
}

// startedTasks is how many tasks the simulated drivers of this process's
// nodes started (s.counts adds the node processes').
func (s *sim) startedTasks() int64 {
	var n int64
	for _, node := range s.nodes {
		n += node.driver.started.Load()
	}
	return n
}

// lastIndex is the last raft index of the server the API asks (0 when it
// does not answer).
func (s *sim) lastIndex(ctx context.Context) uint64 {
	self, err := s.api.AgentSelf(ctx)
	if err != nil {
		return 0
	}
	return self.GetServer().GetLastIndex()
}
