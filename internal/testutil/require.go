package testutil

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// EnvCI is the variable CI systems set (CI=true on GitHub Actions, GitLab
// and .ci/run's runners). Under it a test that cannot run fails: CI runs as
// root with every tool installed, so a skip there means the gate did not
// test what it claims, and a CSI conformance failure must never read as ok.
const EnvCI = "CI"

// InCI reports whether the tests run under CI: EnvCI holds a true value as
// strconv.ParseBool reads it ("true", "1", "t", ...).
func InCI() bool {
	ci, err := strconv.ParseBool(os.Getenv(EnvCI))
	return err == nil && ci
}

// skipFataler is the part of testing.TB the requirement helpers use, so
// their own tests can record the outcome instead of ending the test
// (testing.TB cannot be implemented outside package testing).
type skipFataler interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
}

// Unavailable ends a test that cannot run here: it skips with the reason
// normally, and fails with it under CI (see EnvCI). Use it for every skip
// caused by the machine (no root, no loop devices, a missing tool), never
// for a skip the test's own inputs decide.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	unavailable(t, InCI(), fmt.Sprintf(format, args...))
}

func unavailable(t skipFataler, ci bool, reason string) {
	t.Helper()
	if ci {
		t.Fatal(reason + " (" + EnvCI + "=true: tests that cannot run fail instead of skipping)")
		return
	}
	t.Skip("skipped: " + reason)
}

// RequireRoot ends the test through Unavailable unless it runs as root;
// why says what needs root ("bind-mounts the staged volume").
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	requireRoot(t, os.Geteuid(), InCI(), why)
}

func requireRoot(t skipFataler, euid int, ci bool, why string) {
	t.Helper()
	if euid != 0 {
		unavailable(t, ci, "needs root: "+why+" (run the tests as root)")
	}
}
