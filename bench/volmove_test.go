package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// TestVolMoveSectionSmoke runs the volmove section's quick plan end to
// end on a real cluster of 3 servers and 2 clients (the berth binary of
// this tree, built here unless BERTH_BIN names one) and checks what it
// measured, not how fast: every round moved the job (each round's
// follower of the volume fails it on two write claims at once), every
// point of every round present (node-detached is observed, and may be
// missed), the old side's points and the new side's each in the order
// the steps happen, the new claim reserved only after the old one was
// node-detached and unstaged, and the report with a verdict per kind.
func TestVolMoveSectionSmoke(t *testing.T) {
	testutil.RequireRoot(t, "the hostpath plugin bind-mounts its volumes")
	// A private copy, so the processes the section starts are known by
	// their executable.
	bin := filepath.Join(t.TempDir(), "berth")
	if from := os.Getenv("BERTH_BIN"); from != "" {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, b, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		cmd := exec.Command("go", "build", "-o", bin, "berth.dev/berth")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building berth: %v\n%s", err, out)
		}
	}
	plan := jobRunPlan{warmup: 1, runs: 2}
	before := benchMounts(t)
	reps, err := measureVolMove([]volMoveBin{{"new", bin}}, plan)
	if err != nil {
		t.Fatal(err)
	}
	// Nor anything running: plugin tasks and their executors outlive a
	// client agent by design, so the teardown stops them first.
	if left := processesOf(t, bin); len(left) > 0 {
		t.Errorf("processes of %s left running after the section: %v", bin, left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	// The cluster's teardown leaves nothing mounted: the consumer's claim
	// is freed before the plugin's node instances stop.
	for _, m := range benchMounts(t) {
		if !slices.Contains(before, m) {
			t.Errorf("left mounted after the section: %s", m)
		}
	}
	if len(reps) != len(volMoveKinds) {
		t.Fatalf("%d reports, want one per kind (%d)", len(reps), len(volMoveKinds))
	}
	for _, rep := range reps {
		if len(rep.runs) != plan.runs {
			t.Fatalf("%s: %d rounds measured, want %d", rep.kind, len(rep.runs), plan.runs)
		}
		for i, run := range rep.runs {
			for _, path := range [][]string{
				{"old alloc told to stop", "old task gone", "unpublished", "unstaged", "node-detached", "new claim reserved"},
				{"new claim reserved", "attached", "staged", "published", "task set up", "task started", "running"},
				{"new claim reserved", "new alloc on its node", "staged"},
			} {
				var last time.Duration
				prev := "the old alloc's stop"
				for _, step := range path {
					d, ok := run[step]
					if !ok && step == "node-detached" {
						continue
					}
					if !ok || d <= 0 || d < last {
						t.Errorf("%s round %d: %s at %v (measured %v), want after %s at %v", rep.kind, i, step, d, ok, prev, last)
					}
					last, prev = d, step
				}
			}
			for _, p := range []string{"claim freed", volMoveOnFollower} {
				if _, ok := run[p]; !ok {
					t.Errorf("%s round %d: no %s point", rep.kind, i, p)
				}
			}
		}
	}
	var out strings.Builder
	if err := printVolMove(&out, reps, plan, true); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"| claim freed |", "| new claim reserved |", "| running |", "(quick mode", "move by update:", "move by stop, run:"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if verdicts := strings.Count(text, ": meets") + strings.Count(text, ": MISSES"); verdicts != 2 {
		t.Errorf("report gives %d verdicts, want 2 (one per kind):\n%s", verdicts, text)
	}
}

// benchMounts lists the mount points under the volmove clusters'
// directories.
func benchMounts(t *testing.T) []string {
	t.Helper()
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], filepath.Join(os.TempDir(), "bvm-")) {
			out = append(out, f[4])
		}
	}
	return out
}

// TestVolMoveReport: the verdict judges the new binary's median against
// the target (on the bound meets, a microsecond over misses), and with an
// old binary the medians are set side by side with their ratio.
func TestVolMoveReport(t *testing.T) {
	run := func(total time.Duration) csiFlowRun {
		r := csiFlowRun{}
		for i, s := range volMoveSteps {
			r[s] = total * time.Duration(i+1) / time.Duration(len(volMoveSteps))
		}
		r[volMoveOnFollower] = total + 10*time.Millisecond
		return r
	}
	var reps []*volMoveReport
	for _, label := range []string{"new", "old"} {
		for _, k := range volMoveKinds {
			total := volMoveTarget
			switch {
			case label == "old":
				total = 2 * volMoveTarget
			case k == "stop, run":
				total += time.Microsecond
			}
			reps = append(reps, &volMoveReport{label: label, kind: k, runs: []csiFlowRun{run(total), run(total), run(time.Second)}})
		}
	}
	var out strings.Builder
	if err := printVolMove(&out, reps, jobRunPlan{warmup: 1, runs: 3}, false); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"move by update: old alloc's stop → new alloc running with the volume: median 100.0 ms: meets ≤ 100.0 ms",
		"move by stop, run: old alloc's stop → new alloc running with the volume: median 100.0 ms: MISSES ≤ 100.0 ms",
		"| update | running | 200.0 ms | 100.0 ms | 0.50 |",
		"the clusters of both binaries round by round",
		"| (running, seen on a follower) | 110.0 ms | 1010.0 ms | 10.0 ms after the leader | – |",
		"| update | running, seen on a follower | 210.0 ms | 110.0 ms | 0.52 |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if verdicts := strings.Count(text, ": meets") + strings.Count(text, ": MISSES"); verdicts != 2 {
		t.Errorf("report gives %d verdicts, want 2 (the new binary's kinds):\n%s", verdicts, text)
	}
}

// processesOf lists the processes whose executable is bin.
func processesOf(t *testing.T, bin string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}
