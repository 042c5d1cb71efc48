package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// fixture is a module of its own with a passing target, a failing one, a
// package without targets, a file whose build constraint excludes its
// target, and a "Fuzz" function outside the test files.
var fixture = map[string]string{
	"go.mod":   "module example.com/fz\n\ngo 1.26.0\n",
	"ok/ok.go": "package ok\n\n// FuzzNotATest is not in a test file.\nfunc FuzzNotATest() {}\n",
	"ok/ok_test.go": `package ok

import "testing"

func FuzzFine(f *testing.F) {
	f.Add("seed")
	f.Fuzz(func(t *testing.T, s string) {})
}

func TestPlain(t *testing.T) {}
`,
	"ok/ext_test.go": `package ok_test

import "testing"

func FuzzExternal(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {})
}
`,
	"ok/never_test.go": `//go:build never

package ok

import "testing"

func FuzzExcluded(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) {}) }
`,
	"broken/broken_test.go": `package broken

import "testing"

func FuzzBoom(f *testing.F) {
	f.Add("boom")
	f.Fuzz(func(t *testing.T, s string) {
		if s == "boom" {
			t.Fatalf("input %q blew up", s)
		}
	})
}
`,
	"none/none.go":      "package none\n",
	"none/none_test.go": "package none\n\nimport \"testing\"\n\nfunc TestNothing(t *testing.T) {}\n",
}

func testOptions(dir string) options {
	// A fixed number of inputs keeps the test short and its result stable.
	return options{goCmd: "go", dirs: []string{dir}, fuzzTime: "20x", minimizeTime: time.Second, patterns: []string{"./..."}}
}

func TestDiscoverFindsEveryTargetAndOnlyTargets(t *testing.T) {
	dir := testutil.WriteFiles(t, t.TempDir(), fixture)
	got, err := discover(context.Background(), testOptions(dir), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []target{
		{dir, "example.com/fz/broken", "FuzzBoom"},
		{dir, "example.com/fz/ok", "FuzzFine"},
		{dir, "example.com/fz/ok", "FuzzExternal"},
	}
	slices.SortFunc(got, func(a, b target) int { return strings.Compare(a.String(), b.String()) })
	slices.SortFunc(want, func(a, b target) int { return strings.Compare(a.String(), b.String()) })
	if !slices.Equal(got, want) {
		t.Fatalf("discovered %v, want %v", got, want)
	}
}

// TestRunFailsAndNamesTheFailingTarget: every target runs, a failing one
// fails the pass, and both the summary and the error name it.
func TestRunFailsAndNamesTheFailingTarget(t *testing.T) {
	dir := testutil.WriteFiles(t, t.TempDir(), fixture)
	var out bytes.Buffer
	err := run(context.Background(), testOptions(dir), &out)
	var fe *FailedError
	if !errors.As(err, &fe) {
		t.Fatalf("run = %v, want a *FailedError\n%s", err, out.String())
	}
	if len(fe.Targets) != 1 || fe.Targets[0] != (target{dir, "example.com/fz/broken", "FuzzBoom"}) {
		t.Errorf("failed targets %v, want only example.com/fz/broken FuzzBoom", fe.Targets)
	}
	if !strings.Contains(err.Error(), "example.com/fz/broken FuzzBoom") {
		t.Errorf("error %q does not name the failing target", err)
	}
	s := out.String()
	for _, want := range []string{
		"FAIL", "example.com/fz/broken FuzzBoom", `input "boom" blew up`,
		"ok ", "example.com/fz/ok FuzzFine", "example.com/fz/ok FuzzExternal",
		"3 targets", "1 failed",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

func TestRunPassesWhenEveryTargetPasses(t *testing.T) {
	files := map[string]string{}
	for k, v := range fixture {
		if !strings.HasPrefix(k, "broken/") {
			files[k] = v
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), testOptions(testutil.WriteFiles(t, t.TempDir(), files)), &out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "2 targets") || !strings.Contains(out.String(), "0 failed") {
		t.Errorf("summary does not count 2 targets and 0 failures:\n%s", out.String())
	}
}

// TestRunCoversEveryModule: berth is two modules (the root and sdk/, a
// module of its own inside it). ./... in the root does not descend into
// the inner one, so each module is named with -C, and a pass covers the
// targets of both; an inner module without targets is refused like the root.
func TestRunCoversEveryModule(t *testing.T) {
	files := map[string]string{
		"inner/go.mod": "module example.com/fz/inner\n\ngo 1.26.0\n",
		"inner/in/in_test.go": `package in

import "testing"

func FuzzInner(f *testing.F) { f.Fuzz(func(t *testing.T, b []byte) {}) }
`,
	}
	for k, v := range fixture {
		if !strings.HasPrefix(k, "broken/") {
			files[k] = v
		}
	}
	root := testutil.WriteFiles(t, t.TempDir(), files)
	inner := filepath.Join(root, "inner")

	o := testOptions(root)
	rootOnly, err := discover(context.Background(), o, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range rootOnly {
		if strings.HasPrefix(tg.pkg, "example.com/fz/inner") {
			t.Fatalf("./... in the outer module found %v: the inner module is not its own, or the fixture is wrong", tg)
		}
	}

	o.dirs = []string{root, inner}
	var out bytes.Buffer
	if err := run(context.Background(), o, &out); err != nil {
		t.Fatalf("run = %v\n%s", err, out.String())
	}
	for _, want := range []string{"3 targets", "0 failed", "example.com/fz/ok FuzzFine", "example.com/fz/inner/in FuzzInner"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	empty := testutil.WriteFiles(t, t.TempDir(), map[string]string{"go.mod": "module example.com/empty\n\ngo 1.26.0\n", "e/e.go": "package e\n"})
	o.dirs = []string{root, empty}
	out.Reset()
	if err := run(context.Background(), o, &out); err == nil || !strings.Contains(err.Error(), "no fuzz targets") || !strings.Contains(err.Error(), empty) {
		t.Fatalf("run over a module without targets = %v, want a no-targets error naming %s\n%s", err, empty, out.String())
	}
}

// TestRunRefusesAModuleWithoutTargets: finding nothing means discovery
// broke (berth has targets), not that there is nothing to fuzz.
func TestRunRefusesAModuleWithoutTargets(t *testing.T) {
	dir := testutil.WriteFiles(t, t.TempDir(), map[string]string{"go.mod": fixture["go.mod"], "none/none.go": "package none\n"})
	var out bytes.Buffer
	err := run(context.Background(), testOptions(dir), &out)
	if err == nil || !strings.Contains(err.Error(), "no fuzz targets") {
		t.Fatalf("run = %v, want a no-targets error\n%s", err, out.String())
	}
}

// TestCoordinatorRace tells Go's fuzz coordinator deadline race (a bare
// "context deadline exceeded" at -fuzztime, no failing input) from real
// findings, which must never be retried away.
func TestCoordinatorRace(t *testing.T) {
	race := "fuzz: elapsed: 3s, execs: 4742 (1580/sec), new interesting: 1 (total: 202)\n" +
		"fuzz: elapsed: 4s, execs: 4742 (0/sec), new interesting: 1 (total: 202)\n" +
		"--- FAIL: FuzzRestore (4.04s)\n    context deadline exceeded\nFAIL\nexit status 1\n"
	for _, c := range []struct {
		name, out string
		want      bool
	}{
		{"the race", race, true},
		{"another target's race", strings.ReplaceAll(race, "FuzzRestore", "FuzzDecode"), false},
		{"a failing input", "--- FAIL: FuzzRestore (0.10s)\n    --- FAIL: FuzzRestore (0.00s)\n        fuzz_test.go:9: boom\n" +
			"    Failing input written to testdata/fuzz/FuzzRestore/0123\n", false},
		{"a deadline with an input written", race + "    Failing input written to testdata/fuzz/FuzzRestore/0123\n", false},
		{"a test failure message", "--- FAIL: FuzzRestore (0.10s)\n    fuzz_test.go:9: restore: context deadline exceeded\n", false},
		{"no failure line", "exit status 1\n", false},
	} {
		if got := coordinatorRace([]byte(c.out), "FuzzRestore"); got != c.want {
			t.Errorf("%s: coordinatorRace = %v, want %v", c.name, got, c.want)
		}
	}
}
