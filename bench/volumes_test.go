package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestVolumeStateIsBuiltThroughTheFSM: the section's state holds what it
// says, after a snapshot and restore, and the measured plan places its
// alloc and reserves its claim there.
func TestVolumeStateIsBuiltThroughTheFSM(t *testing.T) {
	vs := volumeState{nodes: 20, volumes: 50, jobs: 2, allocsPerJob: 30, targets: 5}
	built, err := vs.build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := restoreFSM(built.snapshot)
	if err != nil {
		t.Fatal(err)
	}
	allocs, _, err := f.State().AllocsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	vols, _, err := f.State().VolumesPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := f.State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := volumeClaimsOf(f)
	if err != nil {
		t.Fatal(err)
	}
	// Every tenth alloc of 60 claims a volume of its own: 6 claims.
	if len(allocs) != 60 || len(vols) != 50 || len(nodes) != 20 || claims != 6 || built.claims != 6 {
		t.Fatalf("state holds %d allocs, %d volumes, %d nodes, %d claims (built says %d), want 60, 50, 20, 6",
			len(allocs), len(vols), len(nodes), claims, built.claims)
	}
	// Both sides run the same state: 60 plans each, in blocks, every one
	// placed with its claim (fsmPlanLatencies fails otherwise).
	lats, err := fsmPlanLatencies(context.Background(), []*builtState{built, built}, vs.targets, 60, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, lat := range lats {
		if len(lat) != 60 || lat[0] <= 0 || !slices.IsSorted(lat) {
			t.Fatalf("side %d: latencies %v, want 60 positive, sorted", i, lat)
		}
	}
}

// TestMeasuredPlanMustReserveItsClaim: a plan whose claim is refused (a
// single-node-writer volume held on another node) fails the check, so a
// run never counts refused plans as throughput.
func TestMeasuredPlanMustReserveItsClaim(t *testing.T) {
	built, err := volumeState{nodes: 4, volumes: 10, jobs: 1, allocsPerJob: 10, targets: 2}.build()
	if err != nil {
		t.Fatal(err)
	}
	f, err := restoreFSM(built.snapshot)
	if err != nil {
		t.Fatal(err)
	}
	held, err := f.State().ClaimsByVolume(nil, "vol-00000")
	if err != nil || len(held) != 1 {
		t.Fatalf("vol-00000 claims %v (%v), want the setup's one", held, err)
	}
	other := volumeNodeID(0)
	if held[0].GetNodeId() == other {
		other = volumeNodeID(1)
	}
	plan := &pb.Plan{EvalId: "e", JobId: "bench",
		Allocs: []*pb.Allocation{benchVolumeAlloc("a-new", "bench", 0, other)},
		Claims: []*pb.Claim{writeClaim("c-new", "vol-00000", "a-new", snwMode)}}
	buf, err := fsm.Encode(fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	res := f.ApplyLog(&raft.Log{Index: built.index + 1, Term: 1, Type: raft.LogCommand, Data: buf})
	if err := checkPlanPlaced(res); err == nil {
		t.Fatalf("a plan whose claim was refused passed the check: %v", res.Response)
	}
}

// tinyVolPlan is the section's plan shrunk for `make test`: every step
// runs (state build, snapshot and restore, FSM-alone latencies, the three
// cluster arms at 1 and 64 proposers), on a small state and short windows.
var tinyVolPlan = volPlan{
	rounds: 1, warmup: 10 * time.Millisecond, window: 50 * time.Millisecond,
	large:  volumeState{nodes: 20, volumes: 60, jobs: 2, allocsPerJob: 40, targets: 4},
	fsmOps: 50, snapshotReps: 1,
}

// TestVolumesSectionSmoke runs the volumes section end to end, small, and
// checks every figure the report prints was measured and is sane (not its
// timings): latencies positive and p50 ≤ p99, every arm applied proposals
// at each proposer count, snapshot and restores timed, and the report
// names the three targets with a verdict.
func TestVolumesSectionSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	plan := tinyVolPlan
	rep, err := measureVolumes(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	// Two jobs of 40 allocs, every tenth claiming a volume: 8 claims.
	if l := rep.large; l.allocs != 80 || l.claims != 8 || l.volumes != 60 || l.nodes != 20 || len(l.snapshot) == 0 {
		t.Errorf("large state: %d allocs, %d claims, %d volumes, %d nodes, %d snapshot bytes; want 80, 8, 60, 20, some",
			l.allocs, l.claims, l.volumes, l.nodes, len(l.snapshot))
	}
	for _, state := range []string{"empty", "large"} {
		p50, p99 := rep.fsmP50[state], rep.fsmP99[state]
		if len(p50) != plan.rounds || len(p99) != plan.rounds || p50[0] <= 0 || p50[0] > p99[0] {
			t.Errorf("FSM alone, %s state: p50 %v, p99 %v; want %d round(s), 0 < p50 ≤ p99", state, p50, p99, plan.rounds)
		}
	}
	for _, arm := range volArmNames {
		for _, procs := range raftProposerCounts {
			runs := rep.runs[arm][procs]
			if len(runs) != plan.rounds {
				t.Errorf("cluster, %s, %d proposers: %d runs, want %d", arm, procs, len(runs), plan.rounds)
				continue
			}
			r := runs[0]
			// Each proposer gets at least one proposal applied.
			if r.ops < procs || len(r.lat) != r.ops || r.opsPerSec() <= 0 || r.percentile(0.5) <= 0 || r.percentile(0.5) > r.percentile(0.99) {
				t.Errorf("cluster, %s, %d proposers: %d ops (%d latencies), %.0f ops/s, p50 %v, p99 %v",
					arm, procs, r.ops, len(r.lat), r.opsPerSec(), r.percentile(0.5), r.percentile(0.99))
			}
		}
	}
	for name, ds := range map[string][]time.Duration{"snapshot": rep.snapshot, "restore": rep.restore, "raft restore": rep.raftRestore} {
		if len(ds) == 0 || slices.Min(ds) <= 0 {
			t.Errorf("%s times %v, want positive", name, ds)
		}
	}
	var out strings.Builder
	if err := rep.print(&out, true); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"| FSM alone (per apply) |", "| large | 64 |", "| snapshot bytes |", "| restore into a fresh FSM |", "(quick mode"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if verdicts := strings.Count(text, ": meets") + strings.Count(text, ": MISSES"); verdicts != 3 {
		t.Errorf("report gives %d verdicts, want 3 (p99, throughput, restore):\n%s", verdicts, text)
	}
}

// TestVolumesVerdicts: the report judges each target from the figures: a
// large-state p99 over twice the empty one, throughput under 0.7× the
// baseline and a restore over 2 s each miss; the opposite figures meet.
func TestVolumesVerdicts(t *testing.T) {
	report := func(p99Large time.Duration, opsLarge int, restore time.Duration) string {
		t.Helper()
		run := func(ops int) loadResult {
			return loadResult{ops: ops, elapsed: time.Second, lat: []time.Duration{time.Millisecond}}
		}
		rep := &volReport{
			plan:    volPlan{rounds: 1},
			large:   &builtState{snapshot: []byte("x")},
			restore: []time.Duration{restore}, snapshot: []time.Duration{time.Millisecond},
			fsmP50: map[string][]time.Duration{"empty": {time.Microsecond}, "large": {time.Microsecond}},
			fsmP99: map[string][]time.Duration{"empty": {10 * time.Microsecond}, "large": {p99Large}},
			runs: map[string]map[int][]loadResult{
				"baseline": {1: {run(1000)}, 64: {run(1000)}},
				"empty":    {1: {run(1000)}, 64: {run(1000)}},
				"large":    {1: {run(1000)}, 64: {run(opsLarge)}},
			},
		}
		var out strings.Builder
		if err := rep.print(&out, false); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	good := report(20*time.Microsecond, 700, 2*time.Second)
	if strings.Contains(good, "MISSES") || strings.Count(good, ": meets") != 3 {
		t.Errorf("figures on every target's bound are judged:\n%s", good)
	}
	bad := report(21*time.Microsecond, 699, 2*time.Second+time.Millisecond)
	for _, want := range []string{"2.10: MISSES ≤ 2", "0.70× the no-op baseline: MISSES", "2.00 s: MISSES ≤ 2 s"} {
		if !strings.Contains(bad, want) {
			t.Errorf("report lacks %q:\n%s", want, bad)
		}
	}
}

// volumeClaimsOf counts the claims f's state holds.
func volumeClaimsOf(f *fsm.FSM) (int, error) {
	claims, _, err := f.State().ClaimsPage(nil, "", 0, nil)
	return len(claims), err
}
