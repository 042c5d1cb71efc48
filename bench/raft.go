package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raftPlan is how long and how often the raft section measures.
type raftPlan struct {
	// rounds is how many runs each FSM gets per configuration; baseline and
	// berth alternate, so machine drift hits both alike.
	rounds int
	// warmup runs before each measured window and is not counted: the first
	// proposals on a fresh cluster also grow raft's files and pools.
	warmup time.Duration
	window time.Duration
	// fsmOnlyOps distinct registrations per FSM-only repetition, a table
	// about the size a measured cluster reaches; fsmOnlyReps repetitions.
	fsmOnlyOps  int
	fsmOnlyReps int
}

var (
	// fullRaftPlan: per payload, 20 clusters of about 1-2s to elect plus
	// 5s of load; about five minutes for both payloads on an idle 2-core
	// machine. Five rounds, because one 2s window on this machine swings
	// by ±20% from the next with nothing changed: the median of five
	// per-round ratios is steady where the median of three was not.
	fullRaftPlan  = raftPlan{rounds: 5, warmup: 500 * time.Millisecond, window: 2 * time.Second, fsmOnlyOps: 10_000, fsmOnlyReps: 3}
	quickRaftPlan = raftPlan{rounds: 1, warmup: 50 * time.Millisecond, window: 200 * time.Millisecond, fsmOnlyOps: 300, fsmOnlyReps: 1}
)

// The configurations measured: cluster sizes and concurrent proposers.
var (
	raftServerCounts   = []int{1, 3}
	raftProposerCounts = []int{1, 64}
)

type raftCell struct{ servers, proposers int }

// cellRuns holds one configuration's measured runs, indexed by round.
// floor is measured only for payloads that ask for it.
type cellRuns struct{ baseline, floor, berth []loadResult }

// add records a run of kind.
func (c *cellRuns) add(kind fsmKind, res loadResult) {
	switch kind.name {
	case berthKind.name:
		c.berth = append(c.berth, res)
	case floorKind.name:
		c.floor = append(c.floor, res)
	default:
		c.baseline = append(c.baseline, res)
	}
}

// raftReport is everything the section prints.
type raftReport struct {
	plan raftPlan
	// payloads in the order measured; the first is the headline, the one
	// the summary leads with.
	payloads []*payloadReport
}

// payloadReport is one payload's measurements.
type payloadReport struct {
	spec         payloadSpec
	entryBytes   int
	cells        map[raftCell]*cellRuns
	largestTable int // most proposals applied on one berth cluster
	fsmOnly      fsmOnlyCost
}

// benchRaft measures raft apply throughput and latency with a no-op FSM (the
// baseline) and with berth's FSM applying NodeRegister, on the stores,
// transport and config the server uses, and prints both with their ratio:
// first for the node a real client registers (the headline), then for a
// synthetic heavy one (the stress payload).
func benchRaft(opts options) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	plan := fullRaftPlan
	if opts.quick {
		plan = quickRaftPlan
	}
	headline, err := realPayload()
	if err != nil {
		return err
	}
	specs := []payloadSpec{headline, stressPayload()}
	if opts.payload != "" {
		specs = slices.DeleteFunc(specs, func(s payloadSpec) bool { return s.name != opts.payload })
		if len(specs) == 0 {
			return fmt.Errorf("no payload named %q: there are real and stress", opts.payload)
		}
	}
	dir, err := os.MkdirTemp("", "berth-bench-raft-")
	if err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing data dir: %w", rerr))
		}
	}()

	rep := raftReport{plan: plan}
	for _, spec := range specs {
		p, err := newPayloads(spec)
		if err != nil {
			return err
		}
		pr, err := measurePayload(ctx, filepath.Join(dir, spec.name), plan, p)
		if err != nil {
			return fmt.Errorf("%s payload: %w", spec.name, err)
		}
		rep.payloads = append(rep.payloads, pr)
	}
	rep.print(opts.quick)
	return nil
}

// measurePayload runs the whole matrix for one payload, then the FSM alone.
func measurePayload(ctx context.Context, dir string, plan raftPlan, p *payloads) (*payloadReport, error) {
	name := p.spec.name
	pr := &payloadReport{spec: p.spec, entryBytes: p.size(), cells: map[raftCell]*cellRuns{}}
	for _, servers := range raftServerCounts {
		for round := range plan.rounds {
			kinds := []fsmKind{baselineKind, berthKind}
			if p.spec.floor {
				kinds = []fsmKind{baselineKind, floorKind, berthKind}
			}
			if round%2 == 1 {
				slices.Reverse(kinds) // ABBA: a drift trend favours neither side
			}
			for _, kind := range kinds {
				fmt.Fprintf(os.Stderr, "raft: %s payload, %s, round %d/%d, %s\n", name, countText(servers, "server"), round+1, plan.rounds, kind.name)
				runDir := filepath.Join(dir, fmt.Sprintf("%ds-round%d-%s", servers, round+1, kind.name))
				results, applied, err := runClusterRetrying(ctx, runDir, servers, kind, plan, p)
				if err != nil {
					return nil, fmt.Errorf("%s, round %d, %s FSM: %w", countText(servers, "server"), round+1, kind.name, err)
				}
				if kind.name == berthKind.name {
					pr.largestTable = max(pr.largestTable, applied)
				}
				for procs, res := range results {
					cell := raftCell{servers, procs}
					if pr.cells[cell] == nil {
						pr.cells[cell] = &cellRuns{}
					}
					pr.cells[cell].add(kind, res)
				}
			}
		}
	}

	fmt.Fprintf(os.Stderr, "raft: %s payload, FSM alone, %d × %d registrations\n", name, plan.fsmOnlyReps, plan.fsmOnlyOps)
	var err error
	if pr.fsmOnly, err = measureFSMOnly(ctx, p, plan.fsmOnlyOps, plan.fsmOnlyReps); err != nil {
		return nil, err
	}
	return pr, nil
}

// leadershipAttempts is how many fresh clusters a run may take. On a
// machine this loaded a leader can miss its lease (500ms by default) and step
// down mid-run; that is the machine, not raft or berth, so the run is redone
// on a fresh cluster rather than failing the section.
const leadershipAttempts = 3

// runClusterRetrying is runCluster, redone when the leader lost its
// leadership. Raft's log lines are kept and printed only when a run fails:
// elections and a normal shutdown log warnings and connection resets that
// mean nothing here.
func runClusterRetrying(ctx context.Context, dir string, servers int, kind fsmKind, plan raftPlan, p *payloads) (map[int]loadResult, int, error) {
	for attempt := 1; ; attempt++ {
		logs := &logBuffer{}
		logger := hclog.New(&hclog.LoggerOptions{Name: "bench-raft", Level: hclog.Warn, Output: logs})
		results, applied, err := runCluster(ctx, fmt.Sprintf("%s-%d", dir, attempt), servers, kind, plan, p, logger)
		if err == nil {
			return results, applied, nil
		}
		lost := errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader)
		if !lost || attempt == leadershipAttempts || ctx.Err() != nil {
			os.Stderr.Write(logs.bytes())
			return nil, 0, err
		}
		fmt.Fprintf(os.Stderr, "raft: leader lost its leadership mid-run (%v); redoing the run on a fresh cluster\n", err)
	}
}

// logBuffer holds a cluster's log lines, up to a limit.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const logBufferLimit = 1 << 20

func (l *logBuffer) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < logBufferLimit {
		l.buf.Write(b)
	}
	return len(b), nil
}

func (l *logBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// runCluster starts a fresh cluster running kind's FSM and measures every
// proposer count on it in turn. It returns the measured runs by proposer
// count and how many proposals the cluster applied in all (berth's node
// table size at the end).
func runCluster(ctx context.Context, dir string, servers int, kind fsmKind, plan raftPlan, p *payloads, logger hclog.Logger) (_ map[int]loadResult, applied int, err error) {
	c, err := startCluster(ctx, dir, servers, kind, logger)
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if serr := c.shutdown(); serr != nil {
			err = errors.Join(err, fmt.Errorf("shutting down: %w", serr))
		}
		// Collect this cluster's garbage now, not during the next run.
		runtime.GC()
	}()
	results := map[int]loadResult{}
	for _, procs := range raftProposerCounts {
		warm, err := runLoad(ctx, c.leader, kind, p, procs, plan.warmup)
		if err != nil {
			return nil, 0, fmt.Errorf("%s, warmup: %w", countText(procs, "proposer"), err)
		}
		res, err := runLoad(ctx, c.leader, kind, p, procs, plan.window)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", countText(procs, "proposer"), err)
		}
		results[procs] = res
		applied += warm.ops + res.ops
	}
	return results, applied, nil
}
