package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContainerdSectionSmoke runs the containerd section's quick plan end
// to end (a private containerd unless BERTH_CONTAINERD_ADDRESS names one,
// the plugin built from examples/containerd, a dev agent of this tree's
// berth unless BERTH_BIN names one) and checks what it measured, not how
// fast: every run of every kind present, received → started → running in
// order, and a report with every row and a verdict.
func TestContainerdSectionSmoke(t *testing.T) {
	if why := ctrdUnavailable(); why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: the containerd section %s", why)
		}
		t.Skip("the containerd section " + why)
	}
	bin := os.Getenv("BERTH_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "berth")
		if out, err := exec.Command("go", "build", "-o", bin, "berth.dev/berth").CombinedOutput(); err != nil {
			t.Fatalf("building berth: %v\n%s", err, out)
		}
	}
	plan := jobRunPlan{warmup: 1, runs: 3}
	rep, err := measureContainerd(bin, plan)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string][]time.Duration{"ctr": rep.ctr, "containerd": rep.ctrd, "exec": rep.exec,
		"containerd starting": rep.ctrdStarting, "exec starting": rep.execStarting, "ctr version": rep.ctrUp} {
		if len(s) != plan.runs {
			t.Errorf("%s: %d runs measured, want %d", name, len(s), plan.runs)
		}
		for i, d := range s {
			if d <= 0 {
				t.Errorf("%s run %d: %v", name, i, d)
			}
		}
	}
	for i := range rep.ctrd {
		if rep.ctrdStarting[i] >= rep.ctrd[i] || rep.execStarting[i] >= rep.exec[i] {
			t.Errorf("run %d: StartTask took longer than job run → running (containerd %v of %v, exec %v of %v)",
				i, rep.ctrdStarting[i], rep.ctrd[i], rep.execStarting[i], rep.exec[i])
		}
	}
	var out strings.Builder
	if err := rep.print(&out, true); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"| ctr run -d |", "| berth containerd: job run → running |", "| berth exec: job run → running |",
		"| berth containerd: received → started (StartTask) |", "| ctr version (ctr's own start-up, one round trip) |", "(quick mode"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if verdicts := strings.Count(text, ": meets") + strings.Count(text, ": MISSES"); verdicts != 1 {
		t.Errorf("report gives %d verdicts, want 1:\n%s", verdicts, text)
	}
}

// TestContainerdReport: the verdict judges the median ratio to ctr run
// against 1.2× (on the bound meets, above misses), and the table gives
// each row's ratio to ctr run.
func TestContainerdReport(t *testing.T) {
	report := func(ctr, ctrd time.Duration) string {
		t.Helper()
		ms := time.Millisecond
		r := &ctrdReport{plan: jobRunPlan{warmup: 1, runs: 3},
			ctr:          []time.Duration{ctr, ctr, 10 * ctr},
			ctrd:         []time.Duration{ctrd, ctrd, ms},
			exec:         []time.Duration{50 * ms, 50 * ms, 50 * ms},
			ctrdStarting: []time.Duration{ms, ms, ms}, execStarting: []time.Duration{ms, ms, ms}, ctrUp: []time.Duration{ms, ms, ms}}
		var out strings.Builder
		if err := r.print(&out, false); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	good := report(100*time.Millisecond, 120*time.Millisecond)
	for _, want := range []string{"median 1.20×: meets the target of ≤ 1.2×", "| berth exec: job run → running | 50.0 ms | 50.0 ms | 0.50× | 0.05× |"} {
		if !strings.Contains(good, want) {
			t.Errorf("report lacks %q:\n%s", want, good)
		}
	}
	if bad := report(100*time.Millisecond, 121*time.Millisecond); !strings.Contains(bad, "median 1.21×: MISSES") {
		t.Errorf("report does not miss at 1.21×:\n%s", bad)
	}
}
