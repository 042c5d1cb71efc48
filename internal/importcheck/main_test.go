package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/internal/testutil"
)

// repoRoot is the real berth module, two levels up from this package.
const repoRoot = "../.."

// minimal is what every synthetic tree needs to be accepted as the module.
var minimal = map[string]string{
	"go.mod":     "module berth.dev/berth\n\ngo 1.26.0\n",
	"fsm/doc.go": "package fsm\n",
	"sdk/doc.go": "package sdk\n",
}

func tree(files map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range minimal {
		out[k] = v
	}
	for k, v := range files {
		out[k] = v
	}
	return out
}

func TestCheckFindsEachViolation(t *testing.T) {
	root := testutil.WriteFiles(t, t.TempDir(), tree(map[string]string{
		"fsm/a.go":            "package fsm\nimport (\n\"net\"\n\"time\"\n)\nvar _ = net.IPv4len\nfunc f() { _ = time.Now() }\n",
		"fsm/b.go":            "package fsm\nimport clock \"time\"\nfunc g() { clock.Sleep(1) }\n",
		"fsm/rand.go":         "package fsm\nimport \"math/rand/v2\"\nvar _ = rand.Int\n",
		"fsm/dot.go":          "package fsm\nimport . \"time\"\nvar _ = Now\n",
		"fsm/unix.go":         "package fsm\nimport \"golang.org/x/sys/unix\"\nvar _ = unix.Getpid\n",
		"fsm/user.go":         "package fsm\nimport \"os/user\"\nvar _ = user.Current\n",
		"fsm/ok_test.go":      "package fsm\nimport \"time\"\nvar _ = time.Now\n",
		"sdk/x.go":            "package sdk\nimport \"berth.dev/berth/fsm\"\nvar _ = fsm.X\n",
		"sdk/x_test.go":       "package sdk\nimport \"berth.dev/berth/internal/testutil\"\nvar _ = testutil.X\n",
		"sdk/y.go":            "package sdk\nimport \"berth.dev/berth/sdk/driverpb\"\nvar _ = driverpb.X\n",
		"csi/c.go":            "package csi\nimport \"berth.dev/berth/host/server\"\nvar _ = server.X\n",
		"host/client/c.go":    "package client\nimport \"berth.dev/berth/host/server\"\nvar _ = server.X\n",
		"host/scheduler/s.go": "package scheduler\nimport \"os\"\nvar _ = os.Args\n",
		"internal/rules/r.go": "package rules\nimport \"time\"\nfunc f() { _ = time.Now() }\n",
	}))
	got, err := check(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`csi/c.go:2:8: csi must not import "berth.dev/berth/host/server": leaf packages do not depend on host/`,
		`fsm/a.go:3:1: fsm must not import "net" (the state machine and scheduler do no I/O)`,
		`fsm/a.go:7:16: fsm must not call time.Now: time travels inside the command`,
		`fsm/b.go:3:12: fsm must not call time.Sleep: time travels inside the command`,
		`fsm/dot.go:2:8: fsm must not dot-import "time": clock calls would hide as plain Now()`,
		`fsm/rand.go:2:8: fsm must not import "math/rand/v2" (the state machine and scheduler do no I/O)`,
		`fsm/unix.go:2:8: fsm must not import "golang.org/x/sys/unix" (the state machine and scheduler do no I/O)`,
		`fsm/user.go:2:8: fsm must not import "os/user" (the state machine and scheduler do no I/O)`,
		`host/scheduler/s.go:2:8: host/scheduler must not import "os" (the state machine and scheduler do no I/O)`,
		`internal/rules/r.go:3:16: internal/rules must not call time.Now: time travels inside the command`,
		`sdk/x.go:2:8: sdk/ must not import "berth.dev/berth/fsm": third-party drivers link sdk/ alone`,
		`sdk/x_test.go:2:8: sdk/ must not import "berth.dev/berth/internal/testutil": third-party drivers link sdk/ alone`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckCleanTree(t *testing.T) {
	root := testutil.WriteFiles(t, t.TempDir(), tree(map[string]string{
		"fsm/a.go":            "package fsm\nimport \"time\"\nvar d time.Duration\n",
		"fsm/a_test.go":       "package fsm\nimport (\n\"os\"\n\"time\"\n)\nvar _, _ = os.Args, time.Now\n",
		"host/cli/a.go":       "package cli\nimport \"berth.dev/berth/host/agent\"\nvar _ = agent.X\n",
		"main.go":             "package main\nimport \"berth.dev/berth/host/cli\"\nvar _ = cli.X\n",
		"csi/c_test.go":       "package csi\nimport \"berth.dev/berth/host/server\"\nvar _ = server.X\n",
		"examples/x/x.go":     "package x\nimport \"berth.dev/berth/host/cli\"\nvar _ = cli.X\n",
		"fsm/testdata/t.go":   "package t\nimport \"net\"\nvar _ = net.IPv4len\n",
		"build/gen/x.go":      "package gen\nimport \"net\"\nvar _ = net.IPv4len\n",
		"csi/hosted/x.go":     "package hosted\nimport \"berth.dev/berth/hostile\"\nvar _ = hostile.X\n",
		"sdk/driverpb/doc.go": "package driverpb\nimport \"berth.dev/berth/sdk\"\nvar _ = sdk.X\n",
	}))
	got, err := check(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("clean tree reported violations:\n%s", strings.Join(got, "\n"))
	}
}

// TestCheckRefusesTheWrongRoot: a check that found no files would pass, so
// a root that is not the module, or lost a package the rules name, is an
// error.
func TestCheckRefusesTheWrongRoot(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no go.mod":      {"fsm/a.go": "package fsm\n", "sdk/a.go": "package sdk\n"},
		"another module": {"go.mod": "module example.com/x\n", "fsm/a.go": "package fsm\n", "sdk/a.go": "package sdk\n"},
		"no fsm":         {"go.mod": minimal["go.mod"], "state/a.go": "package state\n", "sdk/a.go": "package sdk\n"},
		"fsm tests only": {"go.mod": minimal["go.mod"], "fsm/a_test.go": "package fsm\n", "sdk/a.go": "package sdk\n"},
		"no sdk":         {"go.mod": minimal["go.mod"], "fsm/a.go": "package fsm\n"},
	} {
		if got, err := check(testutil.WriteFiles(t, t.TempDir(), files), nil); err == nil {
			t.Errorf("%s: check passed with %v, want an error", name, got)
		}
	}
}

// TestRealTreeIsClean runs the check over the real module, as make check does.
func TestRealTreeIsClean(t *testing.T) {
	got, err := check(repoRoot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("the repository violates the import rules:\n%s", strings.Join(got, "\n"))
	}
}

// realFileWithImports returns a non-test Go file of the real package dir
// that has a parenthesized import block, the file's source and the line of
// that block's "import (". Found at run time, so files other changes add or
// remove do not break this test.
func realFileWithImports(t *testing.T, dir string) (rel string, src []byte, line int) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot, dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(repoRoot, dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range strings.Split(string(src), "\n") {
			if l == "import (" {
				return dir + "/" + e.Name(), src, i + 1
			}
		}
	}
	t.Fatalf("no file in %s/ has an import block", dir)
	return "", nil, 0
}

// plant adds an import line as the first line of rel's import block.
func plant(src []byte, imp string) []byte {
	return []byte(strings.Replace(string(src), "import (\n", "import (\n\t"+imp+"\n", 1))
}

// TestRealTreeViolationsAreFound plants violations in real packages of the
// real tree (an overlay, nothing is written) and checks that each is found
// and named with its file and line — so the check that make check runs
// looks at the packages DESIGN.md's rules are about, not only at synthetic
// trees.
func TestRealTreeViolationsAreFound(t *testing.T) {
	overlay := map[string][]byte{}
	var want []string
	for _, p := range []struct {
		dir, imp, msg string
	}{
		{"fsm", `"net"`, `fsm must not import "net"`},
		{"sdk", `"berth.dev/berth/fsm"`, `sdk/ must not import "berth.dev/berth/fsm"`},
		{"sdk/drivertest", `"berth.dev/berth/internal/testutil"`, `sdk/ must not import "berth.dev/berth/internal/testutil"`},
		{"csi", `"berth.dev/berth/host/server"`, `csi must not import "berth.dev/berth/host/server"`},
	} {
		rel, src, line := realFileWithImports(t, p.dir)
		overlay[rel] = plant(src, p.imp)
		want = append(want, fmt.Sprintf("%s:%d:2: %s", rel, line+1, p.msg))
	}
	// A clock call in a new file of the real fsm package, and the scheduler
	// package that does not exist yet.
	overlay["fsm/zz_clock.go"] = []byte("package fsm\n\nimport \"time\"\n\nfunc stamp() int64 { return time.Now().UnixNano() }\n")
	want = append(want, "fsm/zz_clock.go:5:29: fsm must not call time.Now")
	overlay["host/scheduler/plan.go"] = []byte("package scheduler\n\nimport \"math/rand\"\n\nvar _ = rand.Intn\n")
	want = append(want, `host/scheduler/plan.go:3:8: host/scheduler must not import "math/rand"`)

	got, err := check(repoRoot, overlay)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	joined := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("missing %q in:\n%s", w, joined)
		}
	}
}

// TestCheckFindsDependencyRuleViolations: each of depRules is found where
// it applies, and not where it does not (test files, the exempt packages,
// the packages the rule is not about).
func TestCheckFindsDependencyRuleViolations(t *testing.T) {
	const raft = "import \"github.com/hashicorp/raft\"\nvar _ = raft.X\n"
	root := testutil.WriteFiles(t, t.TempDir(), tree(map[string]string{
		// host/client/... imports neither fsm nor host/scheduler.
		"host/client/a.go":             "package client\nimport \"berth.dev/berth/fsm\"\nvar _ = fsm.X\n",
		"host/client/allocrunner/b.go": "package allocrunner\nimport \"berth.dev/berth/host/scheduler/feasible\"\nvar _ = feasible.X\n",
		"host/client/a_test.go":        "package client\nimport \"berth.dev/berth/fsm\"\nvar _ = fsm.X\n",
		"host/agent/a.go":              "package agent\nimport \"berth.dev/berth/fsm\"\nvar _ = fsm.X\n",
		// csi/... imports nothing under builtin/.
		"csi/adapters/c.go": "package adapters\nimport \"berth.dev/berth/builtin/csi/adapters\"\nvar _ = adapters.X\n",
		"csi/c_test.go":     "package csi\nimport \"berth.dev/berth/builtin/csi/hostpath\"\nvar _ = hostpath.X\n",
		"host/cli/b.go":     "package cli\nimport \"berth.dev/berth/builtin/csi/hostpath\"\nvar _ = hostpath.X\n",
		// Leaf packages do not link raft, test helpers and tools under
		// internal/ included; the server core and fsm may, and so may tests.
		"rpc/errcode/e.go":            "package errcode\n" + raft,
		"csi/r.go":                    "package csi\n" + raft,
		"csi/rb.go":                   "package csi\nimport \"github.com/hashicorp/raft-boltdb/v2\"\nvar _ = raftboltdb.X\n",
		"internal/backoff/b.go":       "package backoff\n" + raft,
		"volumehooks/r.go":            "package volumehooks\n" + raft,
		"taskdrivers/r.go":            "package taskdrivers\n" + raft,
		"sdk/r.go":                    "package sdk\n" + raft,
		"rpc/errcode/e_test.go":       "package errcode\n" + raft,
		"internal/testutil/fill/f.go": "package fill\n" + raft,
		"internal/fuzzshort/f.go":     "package main\n" + raft,
		"fsm/r.go":                    "package fsm\n" + raft,
		"host/server/r.go":            "package server\n" + raft,
		"internal/raftlike/r.go":      "package raftlike\nimport \"github.com/hashicorp/raftlike\"\nvar _ = raftlike.X\n",
		// volumehooks imports nothing of host/ (the leaf rule).
		"volumehooks/h.go": "package volumehooks\nimport \"berth.dev/berth/host/client/allocrunner\"\nvar _ = allocrunner.X\n",
		// Nothing imports bench, tests included.
		"host/cli/c.go":        "package cli\nimport \"berth.dev/berth/bench\"\nvar _ = bench.X\n",
		"host/agent/b_test.go": "package agent\nimport \"berth.dev/berth/bench\"\nvar _ = bench.X\n",
		"main.go":              "package main\nimport \"berth.dev/berth/benchmarks\"\nvar _ = benchmarks.X\n",
	}))
	got, err := check(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	const raftWhy = `: leaf packages (rpc/, csi/, internal/, volumehooks/, taskdrivers/, sdk/) do not link raft: only the server core and fsm do`
	want := []string{
		`csi/adapters/c.go:2:8: csi/adapters must not import "berth.dev/berth/builtin/csi/adapters": the CSI library (csi/...) does not link the built-in plugins (builtin/...)`,
		`csi/r.go:2:8: csi must not import "github.com/hashicorp/raft"` + raftWhy,
		`csi/rb.go:2:8: csi must not import "github.com/hashicorp/raft-boltdb/v2"` + raftWhy,
		`host/agent/b_test.go:2:8: host/agent must not import "berth.dev/berth/bench": bench is a program: nothing imports it`,
		`host/cli/c.go:2:8: host/cli must not import "berth.dev/berth/bench": bench is a program: nothing imports it`,
		`host/client/a.go:2:8: host/client must not import "berth.dev/berth/fsm": host/client/... links neither the state machine nor the scheduler (the rules they share are a leaf package)`,
		`host/client/allocrunner/b.go:2:8: host/client/allocrunner must not import "berth.dev/berth/host/scheduler/feasible": host/client/... links neither the state machine nor the scheduler (the rules they share are a leaf package)`,
		`internal/backoff/b.go:2:8: internal/backoff must not import "github.com/hashicorp/raft"` + raftWhy,
		`internal/fuzzshort/f.go:2:8: internal/fuzzshort must not import "github.com/hashicorp/raft"` + raftWhy,
		`internal/testutil/fill/f.go:2:8: internal/testutil/fill must not import "github.com/hashicorp/raft"` + raftWhy,
		`rpc/errcode/e.go:2:8: rpc/errcode must not import "github.com/hashicorp/raft"` + raftWhy,
		`sdk/r.go:2:8: sdk must not import "github.com/hashicorp/raft"` + raftWhy,
		`taskdrivers/r.go:2:8: taskdrivers must not import "github.com/hashicorp/raft"` + raftWhy,
		`volumehooks/h.go:2:8: volumehooks must not import "berth.dev/berth/host/client/allocrunner": leaf packages do not depend on host/`,
		`volumehooks/r.go:2:8: volumehooks must not import "github.com/hashicorp/raft"` + raftWhy,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRealTreeDependencyRulesAreFound plants one violation of each
// dependency rule as a new file in a real package of the real tree (an
// overlay, nothing is written) and checks that exactly those are found on
// top of what the tree already violates. New files leave the real files'
// line numbers alone, so the tree's own violations, if any, compare equal.
// Removing a rule fails this test; so does renaming a package it is about.
func TestRealTreeDependencyRulesAreFound(t *testing.T) {
	baseline, err := check(repoRoot, nil)
	if err != nil {
		t.Fatal(err)
	}
	overlay := map[string][]byte{}
	var want []string
	for _, p := range []struct {
		dir, file, imp, msg string
	}{
		{"host/client", "zz_planted.go", "berth.dev/berth/fsm", "links neither the state machine nor the scheduler"},
		{"host/client/allocrunner", "zz_planted.go", "berth.dev/berth/host/scheduler", "links neither the state machine nor the scheduler"},
		{"csi", "zz_planted.go", "berth.dev/berth/builtin/csi/hostpath", "does not link the built-in plugins"},
		{"csi/adapters", "zz_planted.go", "berth.dev/berth/builtin/csi/adapters", "does not link the built-in plugins"},
		{"rpc/errcode", "zz_planted.go", "github.com/hashicorp/raft", "do not link raft"},
		{"internal/backoff", "zz_planted.go", "github.com/hashicorp/raft", "do not link raft"},
		{"internal/testutil", "zz_planted.go", "github.com/hashicorp/raft", "do not link raft"},
		{"volumehooks", "zz_planted.go", "github.com/hashicorp/raft", "do not link raft"},
		{"taskdrivers", "zz_planted.go", "github.com/hashicorp/raft", "do not link raft"},
		{"sdk", "zz_planted.go", "github.com/hashicorp/raft", "do not link raft"},
		{"volumehooks", "zz_planted_host.go", "berth.dev/berth/host/agent", "leaf packages do not depend on host/"},
		{"host/cli", "zz_planted.go", "berth.dev/berth/bench", "nothing imports it"},
		{"host/agent", "zz_planted_test.go", "berth.dev/berth/bench", "nothing imports it"},
	} {
		if fi, err := os.Stat(filepath.Join(repoRoot, p.dir)); err != nil || !fi.IsDir() {
			t.Fatalf("%s/ is not a directory of the tree (%v): a rule names it, so a move must move the rule", p.dir, err)
		}
		rel := p.dir + "/" + p.file
		overlay[rel] = []byte(fmt.Sprintf("package planted\n\nimport %q\n", p.imp))
		want = append(want, fmt.Sprintf("%s:3:8: %s must not import %q: ", rel, p.dir, p.imp)+"\x00"+p.msg)
	}
	// Allowed: the server core and fsm link raft, and the client's tests
	// may build fsm state.
	for rel, imp := range map[string]string{
		"host/server/zz_planted.go":           "github.com/hashicorp/raft",
		"fsm/zz_planted.go":                   "github.com/hashicorp/raft",
		"host/client/zz_planted_fsm_test.go":  "berth.dev/berth/fsm",
		"csi/zz_planted_builtin_test.go":      "berth.dev/berth/builtin/csi/hostpath",
		"rpc/errcode/zz_planted_raft_test.go": "github.com/hashicorp/raft",
	} {
		overlay[rel] = []byte(fmt.Sprintf("package planted\n\nimport %q\n", imp))
	}

	got, err := check(repoRoot, overlay)
	if err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, v := range got {
		if !slices.Contains(baseline, v) {
			added = append(added, v)
		}
	}
	if len(added) != len(want) {
		t.Errorf("planting found %d new violations, want %d:\n%s", len(added), len(want), strings.Join(added, "\n"))
	}
	joined := strings.Join(added, "\n")
	for _, w := range want {
		head, msg, _ := strings.Cut(w, "\x00")
		found := false
		for _, a := range added {
			if strings.HasPrefix(a, head) && strings.Contains(a, msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("missing %q ... %q in:\n%s", head, msg, joined)
		}
	}
}

// runMainEnv makes the test binary run main with its arguments instead of
// the tests, so TestMainExitCodes sees the real command's exit codes and
// output without a build.
const runMainEnv = "BERTH_IMPORTCHECK_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) != "" {
		os.Args = append(os.Args[:1], strings.Fields(os.Getenv(runMainEnv))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestMainExitCodes runs the command as make check does: exit 0 and silent
// on the real tree, 1 with file:line on a violation, 2 on the wrong root.
func TestMainExitCodes(t *testing.T) {
	bad := testutil.WriteFiles(t, t.TempDir(), tree(map[string]string{"fsm/a.go": "package fsm\nimport \"net\"\nvar _ = net.IPv4len\n"}))
	for _, tc := range []struct {
		root string
		exit int
		out  *regexp.Regexp
	}{
		{repoRoot, 0, regexp.MustCompile(`^$`)},
		{bad, 1, regexp.MustCompile(`(?s)^fsm/a.go:2:8: fsm must not import "net".*: 1 violation`)},
		{t.TempDir(), 2, regexp.MustCompile(`not the berth module's root`)},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), runMainEnv+"="+tc.root)
		out, err := cmd.CombinedOutput()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.exit || !tc.out.Match(out) {
			t.Errorf("importcheck %s: exit %d, output %q; want exit %d matching %s", tc.root, code, out, tc.exit, tc.out)
		}
	}
}
