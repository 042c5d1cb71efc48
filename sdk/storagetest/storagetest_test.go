package storagetest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/sdk"
)

// TestMain serves the fake adapter when the harness re-executes this test
// binary as one; "exit-1" makes the process fail after a clean shutdown.
func TestMain(m *testing.M) {
	broken := os.Getenv(brokenEnv)
	if os.Getenv(serveEnv) == "1" {
		code := serve(func(env sdk.StorageEnv) (sdk.StorageAdapter, error) {
			f, err := newFake(env.DataDir, broken)
			return sdk.StorageAdapter{Name: fakeName(broken), Identity: f, Controller: f, Node: f}, err
		})
		if code == 0 && broken == "exit-1" {
			code = 1
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// childTimeout bounds the calls of a harness run against a broken fake,
// which may wait for something that never comes.
const childTimeoutEnv = "STORAGETEST_CHILD_TIMEOUT"

// TestFakeConformance runs the harness against the fake: a correct
// adapter passes every check, without root.
func TestFakeConformance(t *testing.T) {
	h := Harness{Name: "fake", Volume: Volume{CapacityBytes: 4 << 20}}
	if d, err := time.ParseDuration(os.Getenv(childTimeoutEnv)); err == nil {
		h.Timeout = d
	}
	Run(t, h)
}

// TestHarnessCatches runs the harness against the fake broken in one way
// at a time (in a child test process, as a failing harness fails its
// test) and checks that it fails, naming what is wrong.
func TestHarnessCatches(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("runs in the parent test process only")
	}
	for broken, want := range map[string]string{
		"wrong-name":              `adapter calls itself "not-fake" in the negotiation, want "fake"`,
		"never-ready":             "adapter not ready within",
		"unadvertised-controller": "without advertising CONTROLLER_SERVICE",
		"create-not-idempotent":   "second CreateVolume(",
		"unknown-internal":        "ControllerPublishVolume of an unknown volume: got",
		"missing-field-ok":        "NodeUnpublishVolume without target_path: got <nil>",
		"unpublish-leaves-target": "is still there",
		"forget-on-restart":       "--- FAIL: TestFakeConformance/RestartKeepsVolumes",
		"exit-1":                  "exited with status 1 when berth shut it down",
	} {
		t.Run(broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakeConformance$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+broken, childTimeoutEnv+"=3s")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the harness passed an adapter broken by %s:\n%s", broken, out)
			}
			if !strings.Contains(string(out), want) {
				t.Fatalf("the harness failed the adapter broken by %s without saying %q:\n%s", broken, want, out)
			}
		})
	}
}
