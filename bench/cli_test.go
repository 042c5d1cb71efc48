package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLISectionSmoke runs the cli section's quick plan end to end on a
// real dev agent (the berth binary of this tree, built here unless
// BERTH_BIN names one) and checks what it printed, not how fast: a row for
// every program timed (both floors too), with a verdict on each target,
// the agent's answer time, and the start-up's package initialisations.
func TestCLISectionSmoke(t *testing.T) {
	if os.Getenv("BERTH_BIN") == "" {
		bin := filepath.Join(t.TempDir(), "berth")
		cmd := exec.Command("go", "build", "-tags", "urfave_cli_no_docs,netgo,osusergo,grpcnotrace", "-o", bin, "berth.dev/berth")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building berth: %v\n%s", err, out)
		}
		t.Setenv("BERTH_BIN", bin)
	}
	t.Setenv("BERTH_CLI_BASE", os.Getenv("BERTH_BIN"))
	outPath := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = f
	err = benchCLI(options{quick: true})
	os.Stdout = stdout
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{
		"(built with tags ",
		"| hello-world (baseline) | ", "| berth version | ", "| berth node status | ",
		"| clifloor version (floor) | ", "| clifloor node-status (floor) | ",
		"| clibare version (no protobuf/gRPC) | ", "| clibare node-status (no protobuf/gRPC) | ",
		"the agent's answer to GET /v1/nodes",
		"| base: berth version | ", "| base: berth node status | ",
		"package initialisation (GODEBUG=inittrace=1", "| berth.dev/berth/rpc/pb | ", "(quick mode",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "| ≤ 3×: "); n != 2 {
		t.Errorf("%d target verdicts, want 2 (berth version, berth node status):\n%s", n, text)
	}
}
