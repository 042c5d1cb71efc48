package cli

import (
	"strings"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// TestExitCodesByClass pins README's "Exit codes": every class of outcome
// exits with its code, whatever the command, and a usage error or an
// unknown command is one line on stderr, not the help text. Before, a flag
// error exited 1 after printing the whole help on stdout, an unknown
// command exited 3 (urfave/cli's code), `job plan` exited 255 on a usage
// error, and README promised only 0 and 1. A failed placement
// (exitPlacementFailed) is pinned by job_run_test.go.
func TestExitCodesByClass(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY}
	f.allocs[allocA] = runningAlloc()
	file := writeJobFile(t, testJob("web"))
	a := func(args ...string) []string { return append(args, "-address", f.url) }

	cases := []struct {
		class string
		args  []string
		code  int
		// stderr holds this (and, for a usage error, nothing else is
		// printed: stdout stays empty).
		stderr string
	}{
		{"success", []string{"version"}, exitOK, ""},
		{"success", a("node", "status", "n1"), exitOK, ""},
		{"error: unknown node", a("node", "status", "ffff"), exitError, `no node with ID or prefix "ffff"`},
		{"error: unreachable agent", []string{"alloc", "status", "-address", "127.0.0.1:1", "a1"}, exitError, "127.0.0.1:1"},
		{"usage: arguments", a("alloc", "status"), exitUsage, "alloc status takes exactly one alloc ID\nUsage: berth alloc status ALLOC\n"},
		{"usage: unknown flag", a("alloc", "status", "-verbose", "a1"), exitUsage, "flag provided but not defined: -verbose\nUsage: berth alloc status ALLOC\n"},
		{"usage: flag value", a("alloc", "logs", "-c", "lots", "a1"), exitUsage, `invalid value "lots" for flag -c`},
		{"usage: global flag", []string{"-nope", "version"}, exitUsage, "flag provided but not defined: -nope\nUsage: berth\n"},
		{"usage: flag value checked by the command", a("volume", "claim", "-mode", "exclusive", "data"), exitUsage, `-mode="exclusive": want read or write`},
		{"unknown command", []string{"nodes"}, exitUsage, `berth has no command "nodes"; its commands: run, version, server, job, alloc,`},
		{"unknown subcommand", []string{"job", "launch", file}, exitUsage, `berth job has no command "launch"; its commands: run, status, stop, plan,`},
		{"unknown help topic", []string{"help", "nodes"}, exitUsage, `berth has no command "nodes"`},
		{"plan: no changes", a("job", "plan", file), planNoChange, ""},
		{"plan: usage", a("job", "plan"), exitUsage, "job plan takes exactly one job file"},
	}
	f.planResp = &pb.JobPlanResponse{DiffType: "none"}
	for _, tc := range cases {
		code, out, errOut := berth(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%s: berth %s: exit %d, stderr %q; want exit %d with %q", tc.class, strings.Join(tc.args, " "), code, errOut, tc.code, tc.stderr)
		}
		if code == exitUsage && (out != "" || strings.Count(errOut, "Error: ") != 1) {
			t.Errorf("%s: berth %s: a usage error printed stdout %q, stderr %q; want one error on stderr", tc.class, strings.Join(tc.args, " "), out, errOut)
		}
	}

	// job plan's own codes: changes, and an error planning.
	f.planResp = &pb.JobPlanResponse{DiffType: "edited", Groups: []*pb.GroupDiff{
		{Name: "frontend", Type: "edited", Updates: &pb.PlanAnnotation{Place: 1}}}}
	wantOut(t, a("job", "plan", file), planChanges, `Task Group: "frontend" (1 create)`)
	f.planResp = nil
	wantOut(t, a("job", "plan", file), planError, "planning job web: the planner broke")
}
