package storagetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/internal/testenv"
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
// which may wait for something that never comes (15 s: short enough for
// the never-ready fake, long enough for nine children launching adapters
// at once under -race on a 2-core machine).
const childTimeoutEnv = "STORAGETEST_CHILD_TIMEOUT"

// nodeRootEnv, when set, is the fake's Harness.NodeNeedsRoot.
const nodeRootEnv = "STORAGETEST_NODE_NEEDS_ROOT"

// TestFakeConformance runs the harness against the fake: a correct
// adapter passes every check, without root.
// With a multi-writer access mode the node lifecycle publishes the
// volume at two targets at once.
func TestFakeConformance(t *testing.T) {
	for name, mode := range map[string]csipb.VolumeCapability_AccessMode_Mode{
		"SingleWriter": csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		"MultiWriter":  csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
	} {
		t.Run(name, func(t *testing.T) {
			h := Harness{Name: "fake", NodeNeedsRoot: os.Getenv(nodeRootEnv),
				Volume: Volume{CapacityBytes: 4 << 20, Capability: MountCapability(mode)}}
			if d, err := time.ParseDuration(os.Getenv(childTimeoutEnv)); err == nil {
				h.Timeout = d
			}
			Run(t, h)
		})
	}
}

// TestLaunch: Launch gives an author the adapter over go-plugin, with
// berth's environment.
func TestLaunch(t *testing.T) {
	p := Launch(t, "fake", nil, []byte(`{}`))
	if p.Adapter().Name() != "fake" || p.Pid() <= 0 {
		t.Fatalf("launched %q, pid %d", p.Adapter().Name(), p.Pid())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := csipb.NewNodeClient(p.Adapter().Conn()).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "fake-"+NodeID {
		t.Errorf("NodeGetInfo = %v, %v", info, err)
	}
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
		"forget-on-restart":       "--- FAIL: TestFakeConformance/SingleWriter/RestartKeepsVolumes",
		"exit-1":                  "exited with status 1 when berth shut it down",
	} {
		t.Run(broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFakeConformance$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+broken, childTimeoutEnv+"=15s")
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

// TestNodeNeedsRoot runs the harness as an unprivileged user against an
// adapter whose node needs root: the checks that stage and publish skip,
// saying why, and fail under CI=true; the others pass.
func TestNodeNeedsRoot(t *testing.T) {
	if os.Getenv(brokenEnv) != "" || os.Getenv(nodeRootEnv) != "" {
		t.Skip("runs in the parent test process only")
	}
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root: runs the harness as another user")
	}
	// The test binary's directory is root's alone: copy it where the
	// unprivileged user can run it.
	dir, err := os.MkdirTemp("", "storagetest-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "storagetest.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	for _, ci := range []string{"false", "true"} {
		cmd := exec.Command(bin, "-test.run=^TestFakeConformance$", "-test.v", "-test.count=1")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), nodeRootEnv+"=it mounts", "CI="+ci, "TMPDIR="+dir, "HOME="+dir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		text := string(out)
		for _, check := range []string{"NodeLifecycle", "RestartKeepsVolumes"} {
			want := "--- SKIP: TestFakeConformance/SingleWriter/" + check
			if ci == "true" {
				want = "--- FAIL: TestFakeConformance/SingleWriter/" + check
			}
			if !strings.Contains(text, want) {
				t.Errorf("CI=%s: no %q in the output", ci, want)
			}
		}
		if !strings.Contains(text, `needs root: adapter "fake": it mounts`) {
			t.Errorf("CI=%s: the skip does not say why", ci)
		}
		for _, check := range []string{"ControllerLifecycle", "UnknownVolumeNotFound", "CleanShutdown"} {
			if !strings.Contains(text, "--- PASS: TestFakeConformance/SingleWriter/"+check) {
				t.Errorf("CI=%s: %s did not pass as non-root", ci, check)
			}
		}
		if (err == nil) != (ci == "false") {
			t.Errorf("CI=%s: the run ended with %v", ci, err)
		}
		if t.Failed() {
			t.Fatalf("output:\n%s", text)
		}
	}
}
