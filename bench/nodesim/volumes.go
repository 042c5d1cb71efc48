package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/volumespec"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/pb"
)

// volumeRun is many jobs, each with its own single-writer CSI volume on the
// nodes' fake plugin: registered to running with the volume claimed,
// staged and published, and the claim in use.
type volumeRun struct {
	Jobs int `json:"jobs"`
	// RunningSeconds is from the first job's register call to every
	// alloc running and every claim in use.
	RunningSeconds float64 `json:"running_seconds"`
	// ClaimsInUse is how many claims the nodes reported in use.
	ClaimsInUse int `json:"claims_in_use"`
	// Phases is the breakdown: when the jobs passed each step.
	Phases []phaseStat `json:"phases,omitempty"`
	// RegisterWidth is how many register calls were in flight at once;
	// RegisterP50 and RegisterP99 how long one took (seconds). With every
	// later step keeping up, the run takes about jobs ÷ width × p50.
	RegisterWidth int     `json:"register_width"`
	RegisterP50   float64 `json:"register_p50_seconds"`
	RegisterP99   float64 `json:"register_p99_seconds"`
}

// registerWidth is how many job register calls the volume scenario keeps in
// flight, as a user's script submitting many jobs would.
const registerWidth = 16

func simVolumeID(i int) string { return fmt.Sprintf("nodesim-vol-%04d", i) }

// registerVolumes registers n single-node-writer volumes of the fake
// plugin (the nodes have no controller: the volumes exist already).
func (s *sim) registerVolumes(ctx context.Context, n int) error {
	return parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		vol, err := volumespec.Parse("nodesim-vol.hcl", fmt.Appendf(nil, `
id          = %q
plugin_id   = %q
external_id = %q
capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
`, simVolumeID(i), simPluginID, simVolumeID(i)), volumespec.ForRegister)
		if err != nil {
			return err
		}
		if _, err := s.api.Volumes().Register(ctx, vol); err != nil {
			return fmt.Errorf("registering volume %s: %w", simVolumeID(i), err)
		}
		return nil
	})
}

// simVolumeJob is one alloc writing to its volume.
func simVolumeJob(id, volume string) (*pb.Job, error) {
	return jobspec.Parse(id+".hcl", fmt.Appendf(nil, `
job %q {
  type = "service"
  group "app" {
    count = 1
    volume "data" {
      type            = "csi"
      source          = %q
      access_mode     = "single-node-writer"
      attachment_mode = "file-system"
    }
    task "app" {
      driver = "mock"
      config {}
      volume_mount {
        volume      = "data"
        destination = "/data"
      }
      resources {
        cpu    = 10
        memory = 8
      }
    }
  }
}
`, id, volume))
}

// runVolumeJobs registers n volumes, then n jobs (one volume each, 16
// register calls at a time), and waits until every job's alloc runs and
// every claim is in use.
func (s *sim) runVolumeJobs(ctx context.Context, n int) (*volumeRun, error) {
	if err := s.registerVolumes(ctx, n); err != nil {
		return nil, err
	}
	jobs := make([]*pb.Job, n)
	for i := range n {
		var err error
		if jobs[i], err = simVolumeJob(fmt.Sprintf("nodesim-vjob-%04d", i), simVolumeID(i)); err != nil {
			return nil, err
		}
	}
	registered := make([]time.Time, n)
	took := make([]float64, n) // each register call, seconds
	if err := s.startPhases(); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := parallel(ctx, n, registerWidth, func(ctx context.Context, i int) error {
		registered[i] = time.Now()
		if _, err := s.api.Jobs().Register(ctx, jobs[i], nil); err != nil {
			return fmt.Errorf("registering job %s: %w", jobs[i].GetId(), err)
		}
		took[i] = time.Since(registered[i]).Seconds()
		return nil
	}); err != nil {
		return nil, err
	}
	// Every volume's claim in use means its alloc was placed with the
	// claim, the claim made ready, the volume staged and published on the
	// node and the in-use report applied; the task starts right after.
	var index uint64
	for {
		inUse, meta, err := s.claimsInUse(ctx, index)
		if err != nil {
			if ctx.Err() != nil {
				return nil, s.withLogs(err)
			}
			index = 0
			continue
		}
		index = meta
		if inUse >= n {
			break
		}
		if ctx.Err() != nil {
			return nil, s.withLogs(fmt.Errorf("%d of %d volume claims in use: %w", inUse, n, ctx.Err()))
		}
	}
	if err := s.waitAllocsRunning(ctx, "nodesim-vjob-", n); err != nil {
		return nil, err
	}
	end := time.Now()
	r := &volumeRun{Jobs: n, RunningSeconds: end.Sub(start).Seconds(), ClaimsInUse: n, RegisterWidth: registerWidth}
	slices.Sort(took)
	r.RegisterP50, r.RegisterP99 = quantile(took, 0.5), quantile(took, 0.99)
	byJob := make(map[string]time.Time, n)
	volumeOf := make(map[string]string, n)
	for i, j := range jobs {
		byJob[j.GetId()] = registered[i]
		volumeOf[j.GetId()] = simVolumeID(i)
	}
	if err := s.gatherPhases(); err != nil {
		return r, err
	}
	var err error
	if r.Phases, err = s.collectPhases(ctx, start, byJob, end, volumeOf); err != nil {
		return r, err
	}
	return r, nil
}

// claimsInUse lists the volumes (paged) once the list passes index and
// counts the claims in use.
func (s *sim) claimsInUse(ctx context.Context, index uint64) (int, uint64, error) {
	q := &api.QueryOptions{PerPage: 1000, WaitIndex: index, WaitTime: 5 * time.Second, Params: map[string]string{"prefix": "nodesim-vol-"}}
	var n int
	var last uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		vols, meta, err := s.api.Volumes().List(cctx, q)
		cancel()
		if err != nil {
			return 0, 0, err
		}
		for _, v := range vols {
			for _, c := range v.GetClaims() {
				if c.GetState() == pb.ClaimState_CLAIM_STATE_IN_USE {
					n++
				}
			}
		}
		last = max(last, meta.LastIndex)
		if meta.NextToken == "" {
			return n, last, nil
		}
		q = &api.QueryOptions{PerPage: 1000, NextToken: meta.NextToken, Params: q.Params}
	}
}

// waitAllocsRunning waits until n allocs of jobs whose IDs start with
// prefix run, by blocking queries on the alloc list.
func (s *sim) waitAllocsRunning(ctx context.Context, prefix string, n int) error {
	var index uint64
	for {
		q := &api.QueryOptions{PerPage: 1000, WaitIndex: index, WaitTime: 5 * time.Second}
		running := 0
		var last uint64
		for {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			allocs, meta, err := s.api.Allocations().List(cctx, q)
			cancel()
			if err != nil {
				return s.withLogs(fmt.Errorf("listing allocs: %w", err))
			}
			for _, a := range allocs {
				if len(a.GetJobId()) >= len(prefix) && a.GetJobId()[:len(prefix)] == prefix &&
					a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING {
					running++
				}
			}
			last = max(last, meta.LastIndex)
			if meta.NextToken == "" {
				break
			}
			q = &api.QueryOptions{PerPage: 1000, NextToken: meta.NextToken}
		}
		if running >= n {
			return nil
		}
		if ctx.Err() != nil {
			return s.withLogs(fmt.Errorf("%d of %d allocs of %s* running: %w", running, n, prefix, ctx.Err()))
		}
		index = last
	}
}

// parallel runs f for 0…n-1, width at a time, and returns the first error.
func parallel(ctx context.Context, n, width int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
