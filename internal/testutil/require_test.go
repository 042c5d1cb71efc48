package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// outcome records what a requirement helper did instead of ending the test.
type outcome struct {
	skipped, failed string
}

func (o *outcome) Helper()           {}
func (o *outcome) Skip(args ...any)  { o.skipped = fmt.Sprint(args...) }
func (o *outcome) Fatal(args ...any) { o.failed = fmt.Sprint(args...) }

var _ skipFataler = (*outcome)(nil)

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "true": true, "1": true, "TRUE": true, "false": false, "0": false, "yes": false,
	} {
		t.Setenv(EnvCI, v)
		if got := InCI(); got != want {
			t.Errorf("CI=%q: InCI() = %v, want %v", v, got, want)
		}
	}
}

func TestRequireRoot(t *testing.T) {
	for _, tc := range []struct {
		name       string
		euid       int
		ci         bool
		skip, fail bool
	}{
		{"root, local", 0, false, false, false},
		{"root, CI", 0, true, false, false},
		{"user, local", 1000, false, true, false},
		{"user, CI", 1000, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o outcome
			requireRoot(&o, tc.euid, tc.ci, "bind-mounts volumes")
			if (o.skipped != "") != tc.skip || (o.failed != "") != tc.fail {
				t.Fatalf("skipped %q, failed %q; want skip=%v fail=%v", o.skipped, o.failed, tc.skip, tc.fail)
			}
			for _, msg := range []string{o.skipped, o.failed} {
				if msg != "" && (!strings.Contains(msg, "needs root") || !strings.Contains(msg, "bind-mounts volumes")) {
					t.Errorf("message %q does not say what needs root", msg)
				}
			}
			if tc.fail && !strings.Contains(o.failed, "CI=true") {
				t.Errorf("failure %q does not say why it is not a skip", o.failed)
			}
		})
	}
}

const childEnv = "BERTH_TESTUTIL_UNAVAILABLE_CHILD"

// TestUnavailableInChild is run only by TestUnavailableEndsTheRealTest, as
// a child process of this test binary.
func TestUnavailableInChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as the child of TestUnavailableEndsTheRealTest")
	}
	Unavailable(t, "no %s here", "widget")
	t.Error("Unavailable returned; the test should have ended")
}

// TestUnavailableEndsTheRealTest checks what `go test` reports, not just
// which method was called: a skip (exit 0) normally, a failure (exit 1)
// under CI=true.
func TestUnavailableEndsTheRealTest(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantExit int
		want     string
	}{
		{"", 0, "--- SKIP: TestUnavailableInChild"},
		{"false", 0, "--- SKIP: TestUnavailableInChild"},
		{"true", 1, "--- FAIL: TestUnavailableInChild"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableInChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"=1", EnvCI+"="+tc.ci)
		out, err := cmd.CombinedOutput()
		exit := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if exit != tc.wantExit || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "no widget here") {
			t.Errorf("CI=%q: exit %d, want %d with %q and the reason:\n%s", tc.ci, exit, tc.wantExit, tc.want, out)
		}
		if strings.Contains(string(out), "should have ended") {
			t.Errorf("CI=%q: the test went on after Unavailable:\n%s", tc.ci, out)
		}
	}
}
