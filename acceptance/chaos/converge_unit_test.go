package chaos

import (
	"strings"
	"testing"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/pb"
)

// TestConvergeTrackerNamesTheSlowest: the key pending at the last look
// before all held is the slowest; of two seen last at the same look, the
// one pending longer (the job, not its new alloc's claim); the timeline
// has each change once. It needs no root and runs in every go test.
func TestConvergeTrackerNamesTheSlowest(t *testing.T) {
	healed := time.Unix(1000, 0)
	at := func(s float64) time.Time { return healed.Add(time.Duration(s * float64(time.Second))) }
	tr := newConvergeTracker(healed)
	tr.look(at(0.5), pendingSet{"job rr1b": "none live", "plugin hp": "0 controllers"})
	tr.look(at(1), pendingSet{"job rr1b": "none live"})
	tr.look(at(26), pendingSet{"job rr1b": "live [pending]", "claim of alloc 3650f7b1 on r1": "ready"})
	tr.look(at(26.5), pendingSet{})
	v := tr.result(at(26.5), 500*time.Millisecond)
	if v.slowest != "job rr1b" || v.why != "live [pending]" || v.took != 26500*time.Millisecond {
		t.Fatalf("slowest %q (%q) after %s; want job rr1b (live [pending]) after 26.5s", v.slowest, v.why, v.took)
	}
	want := []string{
		"+0.500s job rr1b: none live",
		"+0.500s plugin hp: 0 controllers",
		"+1.000s plugin hp: holds",
		"+26.000s claim of alloc 3650f7b1 on r1: ready",
		"+26.000s job rr1b: live [pending]",
		"+26.500s claim of alloc 3650f7b1 on r1: holds",
		"+26.500s job rr1b: holds",
	}
	if got := strings.Join(v.timeline, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("timeline:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if s := v.String(); !strings.Contains(s, "converged 26.5s") || !strings.Contains(s, "slowest: job rr1b") {
		t.Fatalf("converge line %q", s)
	}

	// Seen first and last at the same looks: the job, not its claim.
	both := newConvergeTracker(healed)
	both.look(at(0.2), pendingSet{"claim of alloc 98854a68 on r1": "in-use", "job rr1a": "live [pending]"})
	both.look(at(0.4), pendingSet{})
	if v := both.result(at(0.4), 0); v.slowest != "job rr1a" {
		t.Fatalf("slowest %q; want job rr1a", v.slowest)
	}

	first := newConvergeTracker(healed)
	first.look(at(0.2), pendingSet{})
	if v := first.result(at(0.2), 0); v.slowest != "" {
		t.Fatalf("nothing pending, yet slowest %q", v.slowest)
	}
}

// TestFiguresReportConvergeDistribution: the figures give min, median,
// p90, p99 and max of the converge times, faults by kind, and the slowest
// runs with what held last in each.
func TestFiguresReportConvergeDistribution(t *testing.T) {
	f := &figures{faults: map[string]int{faultFullDisk: 3}, runs: 100}
	for i := range 100 {
		f.converge = append(f.converge, runConverge{seed: int64(3000 + i), took: time.Duration(i+1) * 100 * time.Millisecond, slowest: "job wj1"})
	}
	f.converge[42].slowest = ""
	s := f.String()
	for _, want := range []string{
		"full-disk=3", "partition-leader=0",
		"(100 runs): min 100ms, median 5s, p90 9s, p99 9.9s, max 10s",
		"slowest runs: seed 3099 10s (job wj1); seed 3098 9.9s (job wj1); seed 3097 9.8s (job wj1);",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("figures lack %q:\n%s", want, s)
		}
	}
}

// TestWorkloadReschedulePolicyFitsTheBound: every service group of the
// workload (consumers, the controller plugin) declares its reschedule
// policy, and its longest delay leaves most of convergeWithin to berth; the
// system job keeps none (system allocs are not rescheduled). Without the
// block the default's 30s alone would fill the bound (seed 2005).
func TestWorkloadReschedulePolicyFitsTheBound(t *testing.T) {
	specs := map[string]string{
		"consumer": consumerJob(&consumer{id: "wj1", volume: "w1", access: "single-node-writer", writer: true, pin: "c3"}, "/bin/true"),
		"hp-ctrl":  pluginJob("hp-ctrl", "service", hostpathTask("controller", "/state")),
		"hp-node":  pluginJob("hp-node", "system", hostpathTask("node", "/state")),
	}
	for name, spec := range specs {
		job, err := jobspec.Parse(name+".hcl", []byte(spec))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, spec)
		}
		for _, g := range job.GetGroups() {
			r := g.GetReschedule()
			if job.GetType() == pb.JobType_JOB_TYPE_SYSTEM {
				if r != nil {
					t.Errorf("%s: a system job with a reschedule policy %v", name, r)
				}
				continue
			}
			if !r.GetUnlimited() || r.GetMaxDelayMs() <= 0 || time.Duration(r.GetMaxDelayMs())*time.Millisecond > convergeWithin/3 {
				t.Errorf("%s: reschedule policy %v: want unlimited, its max delay at most %s", name, r, convergeWithin/3)
			}
		}
	}
}
