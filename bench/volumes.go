package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server"
)

// The volumes section measures the plan command that places one alloc
// with one volume claim: its FSM apply latency, and a raft
// cluster's throughput at 1 and 64 proposers, in an empty state and in a
// large one (10,000 volumes, 1,000 nodes, 100,000 allocations, about
// 10,000 claims), both built by applying commands to the state machine;
// beside them the no-op FSM baseline on the same raft, stores and payload
// bytes, measured in the same run, rounds interleaved, and the go-memdb
// floor (raft_floor.go: each entry's bytes inserted as one row, the least
// an FSM keeping its state in go-memdb does). Then snapshot and restore
// time of the large state. Targets: p99 large/empty ≤ 2×;
// throughput at 64 proposers ≥ 0.7× the baseline; restore ≤ 2 s.

type volPlan struct {
	rounds         int
	warmup, window time.Duration
	large          volumeState
	// fsmOps is how many plans each state takes, one apply each, per
	// FSM-alone round.
	fsmOps       int
	snapshotReps int
}

var (
	fullVolPlan = volPlan{
		rounds: 3, warmup: 300 * time.Millisecond, window: 2 * time.Second,
		large:  volumeState{nodes: 1000, volumes: 10_000, jobs: 100, allocsPerJob: 1000, targets: 100},
		fsmOps: 3000, snapshotReps: 3,
	}
	quickVolPlan = volPlan{
		rounds: 1, warmup: 20 * time.Millisecond, window: 100 * time.Millisecond,
		large:  volumeState{nodes: 40, volumes: 200, jobs: 4, allocsPerJob: 50, targets: 8},
		fsmOps: 100, snapshotReps: 1,
	}
)

// planKind is berth's FSM judged by what the measured plan must do: place
// its alloc and reserve its claim (a refused node is not throughput).
var planKind = fsmKind{
	name:   "berth",
	newFSM: func(l hclog.Logger) raft.FSM { return fsm.New(l) },
	check:  checkPlanPlaced,
}

// volArmNames are the cluster arms in the order the report prints them.
var volArmNames = []string{"baseline", "memdb floor", "empty", "large"}

// volArm is one side of the cluster comparison: the baseline, or berth
// on a state (nil: the FSM starts empty, as the baseline's).
type volArm struct {
	name  string
	kind  fsmKind
	state *builtState
}

// volReport is what the section prints.
type volReport struct {
	plan              volPlan
	large             *builtState
	build             time.Duration
	snapshot, restore []time.Duration
	raftRestore       []time.Duration
	fsmP50, fsmP99    map[string][]time.Duration // by state name, per round
	runs              map[string]map[int][]loadResult
}

func benchVolumes(opts options) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	plan := fullVolPlan
	if opts.quick {
		plan = quickVolPlan
	}
	rep, err := measureVolumes(ctx, plan)
	if err != nil {
		return err
	}
	return rep.print(os.Stdout, opts.quick)
}

func measureVolumes(ctx context.Context, plan volPlan) (_ *volReport, err error) {
	rep := &volReport{plan: plan, fsmP50: map[string][]time.Duration{}, fsmP99: map[string][]time.Duration{},
		runs: map[string]map[int][]loadResult{}}
	l := plan.large
	fmt.Fprintf(os.Stderr, "volumes: building the large state through the FSM (%d nodes, %d volumes, %d allocs)\n",
		l.nodes, l.volumes, l.jobs*l.allocsPerJob)
	start := time.Now()
	if rep.large, err = l.build(); err != nil {
		return nil, fmt.Errorf("building the large state: %w", err)
	}
	rep.build = time.Since(start)
	empty, err := volumeState{targets: l.targets}.build()
	if err != nil {
		return nil, fmt.Errorf("building the empty state: %w", err)
	}
	runtime.GC()

	for range plan.snapshotReps {
		s, r, err := snapshotRestoreTimes(ctx, rep.large)
		if err != nil {
			return nil, err
		}
		rep.snapshot, rep.restore = append(rep.snapshot, s), append(rep.restore, r)
	}

	for round := range plan.rounds {
		fmt.Fprintf(os.Stderr, "volumes: FSM alone, empty and large state interleaved, round %d/%d\n", round+1, plan.rounds)
		lats, err := fsmPlanLatencies(ctx, []*builtState{empty, rep.large}, l.targets, plan.fsmOps, round%2 == 1)
		if err != nil {
			return nil, fmt.Errorf("FSM alone: %w", err)
		}
		for i, name := range []string{"empty", "large"} {
			rep.fsmP50[name] = append(rep.fsmP50[name], percentile(lats[i], 0.50))
			rep.fsmP99[name] = append(rep.fsmP99[name], percentile(lats[i], 0.99))
		}
	}

	dir, err := os.MkdirTemp("", "berth-bench-volumes-")
	if err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing data dir: %w", rerr))
		}
	}()
	arms := []volArm{{"baseline", baselineKind, nil}, {"memdb floor", floorKind, nil}, {"empty", planKind, empty}, {"large", planKind, rep.large}}
	for round := range plan.rounds {
		order := slices.Clone(arms)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, arm := range order {
			fmt.Fprintf(os.Stderr, "volumes: cluster, %s, round %d/%d\n", arm.name, round+1, plan.rounds)
			res, err := runVolumeCluster(ctx, filepath.Join(dir, fmt.Sprintf("r%d-%s", round, arm.name)), arm, plan, rep)
			if err != nil {
				return nil, fmt.Errorf("cluster, %s, round %d: %w", arm.name, round+1, err)
			}
			if rep.runs[arm.name] == nil {
				rep.runs[arm.name] = map[int][]loadResult{}
			}
			for procs, r := range res {
				rep.runs[arm.name][procs] = append(rep.runs[arm.name][procs], r)
			}
		}
	}
	return rep, nil
}

// snapshotRestoreTimes restores the state into a fresh FSM, then times a
// snapshot of it (persisted into memory) and a restore of that snapshot
// into another fresh FSM, checking the restored state holds every alloc.
func snapshotRestoreTimes(ctx context.Context, st *builtState) (snap, restore time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	f, err := restoreFSM(st.snapshot)
	if err != nil {
		return 0, 0, err
	}
	runtime.GC()
	start := time.Now()
	b, err := snapshotFSM(f)
	snap = time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	f = nil
	runtime.GC()
	start = time.Now()
	g, err := restoreFSM(b)
	restore = time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	allocs, _, err := g.State().AllocsPage(nil, "", 0, nil)
	if err != nil {
		return 0, 0, err
	}
	if len(allocs) != st.allocs {
		return 0, 0, fmt.Errorf("restored state holds %d allocs, built %d", len(allocs), st.allocs)
	}
	runtime.GC()
	return snap, restore, nil
}

// fsmLatencyBlock is how many plans fsmPlanLatencies applies to one
// state before switching to the other: small enough that a burst of other
// work on the shared machine lands on both states alike.
const fsmLatencyBlock = 25

// fsmPlanLatencies applies ops measured plans one by one to an FSM
// restored from each state, timing each apply, and returns each state's
// sorted latencies. The states take turns, a block of plans each, in ABBA
// order (reversed when reverse is set), so that drift in the machine's
// speed and the garbage collector's cycles (every FSM lives in the one
// heap throughout) fall on every state alike.
func fsmPlanLatencies(ctx context.Context, states []*builtState, targets, ops int, reverse bool) ([][]time.Duration, error) {
	type side struct {
		f       *fsm.FSM
		index   uint64
		entries [][]byte
		lat     []time.Duration
	}
	sides := make([]*side, len(states))
	for i, st := range states {
		f, err := restoreFSM(st.snapshot)
		if err != nil {
			return nil, err
		}
		p := &planProposals{targets: targets}
		s := &side{f: f, index: st.index, entries: make([][]byte, ops), lat: make([]time.Duration, 0, ops)}
		for k := range s.entries {
			s.entries[k] = p.next()
		}
		sides[i] = s
	}
	runtime.GC()
	for block := 0; block*fsmLatencyBlock < ops; block++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		order := slices.Clone(sides)
		if (block%2 == 1) != reverse {
			slices.Reverse(order)
		}
		for _, s := range order {
			for _, data := range s.entries[block*fsmLatencyBlock : min((block+1)*fsmLatencyBlock, ops)] {
				s.index++
				log := &raft.Log{Index: s.index, Term: 1, Type: raft.LogCommand, Data: data}
				start := time.Now()
				res := s.f.ApplyLog(log)
				s.lat = append(s.lat, time.Since(start))
				if err := checkPlanPlaced(res); err != nil {
					return nil, err
				}
			}
		}
	}
	out := make([][]time.Duration, len(sides))
	for i, s := range sides {
		slices.Sort(s.lat)
		out[i] = s.lat
	}
	return out, nil
}

// runVolumeCluster starts a one-server cluster for arm, loads its state
// through raft's restore (the path an operator's snapshot restore takes),
// and measures each proposer count.
func runVolumeCluster(ctx context.Context, dir string, arm volArm, plan volPlan, rep *volReport) (_ map[int]loadResult, err error) {
	logs := &logBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "bench-volumes", Level: hclog.Warn, Output: logs})
	defer func() {
		if err != nil {
			os.Stderr.Write(logs.bytes())
		}
	}()
	c, err := startCluster(ctx, dir, 1, arm.kind, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := c.shutdown(); serr != nil {
			err = errors.Join(err, fmt.Errorf("shutting down: %w", serr))
		}
		runtime.GC()
	}()
	if arm.state != nil {
		meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: arm.state.index, Term: 1, Size: int64(len(arm.state.snapshot))}
		start := time.Now()
		if err := c.leader.Restore(meta, bytes.NewReader(arm.state.snapshot), applyTimeout); err != nil {
			return nil, fmt.Errorf("restoring the %s state through raft: %w", arm.name, err)
		}
		if arm.state == rep.large {
			rep.raftRestore = append(rep.raftRestore, time.Since(start))
		}
		runtime.GC()
	}
	p := &planProposals{targets: plan.large.targets}
	out := map[int]loadResult{}
	for _, procs := range raftProposerCounts {
		if _, err := runLoad(ctx, c.leader, arm.kind, p, procs, plan.warmup); err != nil {
			return nil, fmt.Errorf("%s, warmup: %w", countText(procs, "proposer"), err)
		}
		res, err := runLoad(ctx, c.leader, arm.kind, p, procs, plan.window)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", countText(procs, "proposer"), err)
		}
		out[procs] = res
	}
	return out, nil
}

// ratios returns, per round, what f says of arm's run against the
// baseline's at procs (NaN: nothing to say, left out).
func (r *volReport) ratios(arm string, procs int, f func(arm, base loadResult) float64) []float64 {
	var out []float64
	a, b := r.runs[arm][procs], r.runs["baseline"][procs]
	for i := range min(len(a), len(b)) {
		if v := f(a[i], b[i]); !math.IsNaN(v) {
			out = append(out, v)
		}
	}
	return out
}

// currentGCPercent reads the collector's target: SetGCPercent is its only
// reader, so set it and put it back.
func currentGCPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func durRatios(num, den []time.Duration) []float64 {
	var out []float64
	for i := range min(len(num), len(den)) {
		if den[i] > 0 {
			out = append(out, float64(num[i])/float64(den[i]))
		}
	}
	return out
}

func (r *volReport) print(w io.Writer, quick bool) error {
	var b strings.Builder
	l := r.plan.large
	fmt.Fprintf(&b, "The plan command placing one alloc with one claim (multi-node-multi-writer volume, no controller), "+
		"round robin over %d target nodes and volumes. Empty state: only those and the job. Large state: %d nodes, "+
		"%d volumes, %d allocs (%d jobs), %d claims, built through the FSM in %s.\n\n",
		l.targets, r.large.nodes, r.large.volumes, r.large.allocs, l.jobs, r.large.claims, fmtLatency(r.build))

	b.WriteString("| FSM alone (per apply) | empty | large | large/empty |\n|---|--:|--:|--:|\n")
	for _, q := range []struct {
		name string
		m    map[string][]time.Duration
	}{{"p50", r.fsmP50}, {"p99", r.fsmP99}} {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", q.name, fmtLatency(medianDur(q.m["empty"])), fmtLatency(medianDur(q.m["large"])),
			ratioText(durRatios(q.m["large"], q.m["empty"])))
	}
	b.WriteString("\n| cluster (1 server) | proposers | ops/s | p50 | p99 | × baseline ops/s | CPU/op | baseline CPU/op ÷ CPU/op |\n" +
		"|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, arm := range volArmNames {
		for _, procs := range raftProposerCounts {
			runs := r.runs[arm][procs]
			var ops []float64
			var p50, p99, cpu []time.Duration
			for _, run := range runs {
				ops = append(ops, run.opsPerSec())
				p50, p99 = append(p50, run.percentile(0.5)), append(p99, run.percentile(0.99))
				if c, ok := run.cpuPerOp(); ok {
					cpu = append(cpu, c)
				}
			}
			ratio, cpuRatio := "–", "–"
			if arm != "baseline" {
				ratio = ratioText(r.ratios(arm, procs, func(a, base loadResult) float64 { return a.opsPerSec() / base.opsPerSec() }))
				cpuRatio = ratioText(r.ratios(arm, procs, func(a, base loadResult) float64 {
					ac, ok1 := a.cpuPerOp()
					bc, ok2 := base.cpuPerOp()
					if !ok1 || !ok2 || ac <= 0 {
						return math.NaN()
					}
					return float64(bc) / float64(ac)
				}))
			}
			cpuText := "–"
			if len(cpu) > 0 {
				cpuText = fmtLatency(medianDur(cpu))
			}
			fmt.Fprintf(&b, "| %s | %d | %.0f | %s | %s | %s | %s | %s |\n", arm, procs, median(ops),
				fmtLatency(medianDur(p50)), fmtLatency(medianDur(p99)), ratio, cpuText, cpuRatio)
		}
	}
	var clusterP99 []float64
	large, empty := r.runs["large"][1], r.runs["empty"][1]
	for i := range min(len(large), len(empty)) {
		clusterP99 = append(clusterP99, float64(large[i].percentile(0.99))/float64(empty[i].percentile(0.99)))
	}
	fmt.Fprintf(&b, "\n| large state | median |\n|---|--:|\n")
	fmt.Fprintf(&b, "| snapshot bytes | %.1f MB |\n", float64(len(r.large.snapshot))/1e6)
	fmt.Fprintf(&b, "| snapshot (persist to memory) | %s |\n", fmtLatency(medianDur(r.snapshot)))
	fmt.Fprintf(&b, "| restore into a fresh FSM | %s |\n", fmtLatency(medianDur(r.restore)))
	fmt.Fprintf(&b, "| restore through raft (user restore on the leader) | %s |\n", fmtLatency(medianDur(r.raftRestore)))

	verdict := func(ok bool) string {
		if ok {
			return "meets"
		}
		return "MISSES"
	}
	fsmP99 := median(durRatios(r.fsmP99["large"], r.fsmP99["empty"]))
	thr := median(r.ratios("large", 64, func(a, base loadResult) float64 { return a.opsPerSec() / base.opsPerSec() }))
	restore := medianDur(r.restore)
	fmt.Fprintf(&b, "\nCluster: raft.Apply until applied, each proposer waiting for its command before proposing the next, "+
		"every arm proposing the same plan bytes on a fresh one-server cluster (raft-boltdb, TCP on 127.0.0.1) that restored its state "+
		"through raft first. CPU/op is the whole process's CPU time (raft, proposers, FSM, GC) per applied command; baseline CPU/op ÷ CPU/op "+
		"is the throughput ratio a CPU-bound cluster would show, which other load on the machine barely moves. "+
		"The memdb floor inserts each entry's bytes as one row of a one-index go-memdb table, one transaction per raft batch. "+
		"Every arm runs with the collector target %d (debug.SetGCPercent; an agent running a server sets %d unless its config says otherwise).\n",
		currentGCPercent(), server.DefaultGCPercent)
	fmt.Fprintf(&b, "\nMedians of %d round(s), the arms interleaved (ABBA). FSM p99 large/empty %.2f: %s ≤ 2 "+
		"(cluster p99 at 1 proposer large/empty %s). Large-state throughput at 64 proposers %.2f× the no-op baseline: %s ≥ 0.7. "+
		"Restore %s: %s ≤ 2 s.\n", r.plan.rounds, fsmP99, verdict(fsmP99 <= 2), ratioText(clusterP99), thr, verdict(thr >= 0.7),
		fmtLatency(restore), verdict(restore <= 2*time.Second))
	if quick {
		b.WriteString("(quick mode: a small state and short windows; the figures mean nothing.)\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing the volumes report: %w", err)
	}
	return nil
}
