package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// TestCSIFlowSectionSmoke runs the csiflow section's quick plan end to end
// on a real dev agent (the berth binary of this tree, built here unless
// BERTH_BIN names one), the raw_exec and the exec consumer interleaved,
// and checks what it measured, not how fast: every point of every run
// present (node-detached is observed, and may be missed) and in the order
// the steps happen (the host mount's going, seen by a watch, may be seen
// after the unpublished event is stamped), and each report naming both
// targets with a verdict.
func TestCSIFlowSectionSmoke(t *testing.T) {
	testutil.RequireRoot(t, "the hostpath plugin bind-mounts its volumes")
	bin := os.Getenv("BERTH_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "berth")
		cmd := exec.Command("go", "build", "-o", bin, "berth.dev/berth")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building berth: %v\n%s", err, out)
		}
	}
	plan := jobRunPlan{warmup: 1, runs: 3}
	reps, err := measureCSIFlow(bin, plan, false, csiFlowRawExec, csiFlowExec)
	if err != nil {
		t.Fatal(err)
	}
	for _, rep := range reps {
		checkCSIFlowReport(t, rep, plan)
	}
}

func checkCSIFlowReport(t *testing.T, rep *csiFlowReport, plan jobRunPlan) {
	t.Helper()
	if len(rep.runs) != plan.runs {
		t.Fatalf("%d runs measured, want %d", len(rep.runs), plan.runs)
	}
	for i, run := range rep.runs {
		for _, path := range [][]string{csiFlowSubmitSteps, csiFlowStopSteps} {
			var last time.Duration
			prev := "the path's start"
			for _, step := range path {
				d, ok := run[step]
				if !ok && step == "node-detached" {
					continue
				}
				if !ok || d <= 0 || d < last {
					t.Errorf("%s run %d: %s at %v (measured %v), want after %s at %v", rep.consumer, i, step, d, ok, prev, last)
				}
				if step == "host mount gone" {
					continue
				}
				last, prev = d, step
			}
		}
	}
	var out strings.Builder
	if err := rep.print(&out, true); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"| claim reserved |", "| staged |", "| host mount gone |", "| unstaged |", "| claim freed |", "(quick mode", rep.consumer + ": stop"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if verdicts := strings.Count(text, ": meets") + strings.Count(text, ": MISSES"); verdicts != 2 {
		t.Errorf("report gives %d verdicts, want 2 (submit → running, stop → freed):\n%s", verdicts, text)
	}
}

// TestCSIFlowReport: the verdicts judge the medians against the targets
// (on the bound meets, a microsecond over misses), a step missing from
// some runs says how many it was measured in, and each path's shares of
// its mean add up to 100%.
func TestCSIFlowReport(t *testing.T) {
	run := func(submit, stop time.Duration, detached bool) csiFlowRun {
		r := csiFlowRun{}
		for i, s := range csiFlowSubmitSteps {
			r[s] = submit * time.Duration(i+1) / time.Duration(len(csiFlowSubmitSteps))
		}
		for i, s := range csiFlowStopSteps {
			r[s] = stop * time.Duration(i+1) / time.Duration(len(csiFlowStopSteps))
		}
		if !detached {
			delete(r, "node-detached")
		}
		return r
	}
	report := func(runs ...csiFlowRun) string {
		t.Helper()
		var out strings.Builder
		if err := (&csiFlowReport{plan: jobRunPlan{warmup: 1, runs: len(runs)}, consumer: csiFlowRawExec, runs: runs}).print(&out, false); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	good := report(run(csiFlowSubmitTarget, csiFlowStopTarget, true), run(csiFlowSubmitTarget, csiFlowStopTarget, true),
		run(time.Second, time.Second, true))
	for _, want := range []string{"median 150.0 ms: meets ≤ 150.0 ms", "median 30.0 ms: meets ≤ 30.0 ms"} {
		if !strings.Contains(good, want) {
			t.Errorf("report lacks %q:\n%s", want, good)
		}
	}
	over := time.Microsecond
	bad := report(run(csiFlowSubmitTarget+over, csiFlowStopTarget+over, true), run(csiFlowSubmitTarget+over, csiFlowStopTarget+over, false))
	for _, want := range []string{"median 150.0 ms: MISSES ≤ 150.0 ms", "median 30.0 ms: MISSES ≤ 30.0 ms", "| node-detached (1 of 2 runs) |"} {
		if !strings.Contains(bad, want) {
			t.Errorf("report lacks %q:\n%s", want, bad)
		}
	}
	// A run that missed node-detached: claim freed is measured from that
	// run's unstaged, and the stop path's shares still add up to 100%.
	stopTable := bad[strings.Index(bad, "| job stop"):]
	total := 0
	for _, line := range strings.Split(stopTable, "\n") {
		cells := strings.Split(line, "|")
		var pct int
		if len(cells) == 7 {
			if _, err := fmt.Sscanf(strings.TrimSpace(cells[5]), "%d%%", &pct); err == nil {
				total += pct
			}
		}
	}
	if total < 97 || total > 103 { // each row rounds to a whole percent
		t.Errorf("stop shares add up to %d%%:\n%s", total, stopTable)
	}
	// Evenly spaced points: each step is a sixth of the submit path, a
	// seventh of the stop path.
	stopAt := strings.Index(good, "| job stop")
	for _, line := range strings.Split(good[:stopAt], "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| job") && !strings.HasSuffix(line, "| 17% |") {
			t.Errorf("row %q: want a share of 17%%", line)
		}
	}
	for _, line := range strings.Split(good[stopAt:], "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| job") && !strings.HasSuffix(line, "| 14% |") {
			t.Errorf("row %q: want a share of 14%%", line)
		}
	}
}
