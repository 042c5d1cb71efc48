package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// loadResult is one measured run: how many proposals were applied, over
// what time, each one's latency, and the CPU the whole process (every
// server of the cluster and the proposers) spent meanwhile.
type loadResult struct {
	ops     int
	elapsed time.Duration
	lat     []time.Duration // sorted
	cpu     time.Duration
	cpuOK   bool // whether the platform reported cpu
}

// cpuPerOp is the process CPU time per applied proposal.
func (r loadResult) cpuPerOp() (time.Duration, bool) {
	if !r.cpuOK || r.ops == 0 {
		return 0, false
	}
	return r.cpu / time.Duration(r.ops), true
}

func (r loadResult) opsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// percentile returns the nearest-rank q-quantile (0 < q <= 1) of the
// latencies, or 0 when there are none.
func (r loadResult) percentile(q float64) time.Duration {
	return percentile(r.lat, q)
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

// proposals hands out the next command to propose; safe for concurrent
// use (every proposer calls it).
type proposals interface{ next() []byte }

// runLoad has proposers goroutines propose on leader, each waiting for its
// command to be applied before proposing the next, until window has passed.
// A proposal's latency runs from raft.Apply to the FSM's answer; throughput
// counts every applied proposal over the time until the last one returned.
// Any failed proposal fails the run: a refused or lost command is not
// throughput.
func runLoad(ctx context.Context, leader *raft.Raft, kind fsmKind, p proposals, proposers int, window time.Duration) (loadResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lats := make([][]time.Duration, proposers)
	cpu0, cpuOK := processCPU()
	start := time.Now()
	deadline := start.Add(window)
	var wg sync.WaitGroup
	for i := range proposers {
		wg.Go(func() {
			// At least one proposal each, so a stalled machine still
			// yields a measurement rather than an empty one.
			for {
				data := p.next()
				t0 := time.Now()
				if err := waitApplied(kind, leader.Apply(data, applyTimeout)); err != nil {
					cancel(fmt.Errorf("proposer %d of %d, after %d applied: %w", i+1, proposers, len(lats[i]), err))
					return
				}
				lats[i] = append(lats[i], time.Since(t0))
				if ctx.Err() != nil || !time.Now().Before(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, cpuOK1 := processCPU()
	if err := context.Cause(ctx); err != nil {
		return loadResult{}, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return loadResult{ops: len(all), elapsed: elapsed, lat: all, cpu: cpu1 - cpu0, cpuOK: cpuOK && cpuOK1}, nil
}
