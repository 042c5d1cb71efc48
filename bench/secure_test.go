package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/internal/testutil"
)

// TestSecureSectionSmoke runs the secure section's quick plan end to end
// (a plain agent and one with TLS and ACL, the berth binary of this tree,
// built here unless BERTH_BIN names one, and the raft clusters) and checks
// what it measured, not how fast: every run on both agents has its task
// running and its claim freed, the secure agent's runs went over HTTPS
// with a token that is not the management one, and the table has a ratio
// row for each measure.
func TestSecureSectionSmoke(t *testing.T) {
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
	arms, err := measureSecureCSIFlow(bin, plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arms {
		if len(a.runs) != plan.runs {
			t.Fatalf("%s: %d runs measured, want %d", a.name, len(a.runs), plan.runs)
		}
		for i, r := range a.runs {
			if r["running"] <= 0 || r["claim freed"] <= 0 {
				t.Errorf("%s run %d: running at %v, claim freed at %v", a.name, i, r["running"], r["claim freed"])
			}
		}
	}
	if got := arms[1].c.Address(); !strings.HasPrefix(got, "https://") {
		t.Errorf("the secure agent was driven at %s, want https", got)
	}
	if arms[1].mgmt == "" || arms[0].mgmt != "" {
		t.Errorf("management tokens: plain %q, secure %q; want only the secure agent bootstrapped", arms[0].mgmt, arms[1].mgmt)
	}
	raftM, err := measureRaftTLS(options{quick: true})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := printSecure(&out, arms, plan, raftM, true); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"| csiflow job run → running (median) |", "| csiflow job stop → claim freed (median) |",
		"| raft throughput, 1 proposers (ops/s) |", "| raft throughput, 64 proposers (ops/s) |", "| raft apply p50, 64 proposers |", "| raft noise floor, 1 proposers: a second plain cluster / plain |", "(quick mode"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "× | ≤ ") + strings.Count(text, "× | ≥ "); n != 6 {
		t.Errorf("report has %d ratio rows, want 6:\n%s", n, text)
	}
}
