package ctrdriver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
)

// fixture is a configured driver against the tests' containerd, in
// process (over gRPC), with the test image archive.
type fixture struct {
	d       *sdk.DriverClient
	addr    string
	archive string
}

var taskSeq atomic.Int64

func newFixture(t *testing.T) *fixture {
	t.Helper()
	addr := containerdAddress(t)
	f := &fixture{addr: addr, archive: imageArchive(t)}
	f.d = drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	if err := f.d.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(addr)}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return f
}

func testCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 60*time.Second)
}

// task is a TaskConfig for driver config dc, named "web", with a task
// directory laid out as berth's (local/ and secrets/ under it, an alloc
// dir beside it).
func (f *fixture) task(t *testing.T, dc sdk.ConfigMap) *driverpb.TaskConfig {
	t.Helper()
	alloc := t.TempDir()
	dir := filepath.Join(alloc, "web")
	for _, sub := range []string{"alloc/logs", "web/local", "web/secrets"} {
		if err := os.MkdirAll(filepath.Join(alloc, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n := taskSeq.Add(1)
	return &driverpb.TaskConfig{
		Id: fmt.Sprintf("ctrd-test-%d-%d", os.Getpid(), n), Name: "web", AllocId: fmt.Sprintf("alloc-%d", n),
		JobId: "job", Group: "group", TaskDir: dir, LogDir: filepath.Join(alloc, "alloc", "logs"),
		Env: map[string]string{
			"PATH":              "/host/path/should/not/win",
			"BERTH_ALLOC_DIR":   filepath.Join(alloc, "alloc"),
			"BERTH_TASK_DIR":    filepath.Join(dir, "local"),
			"BERTH_SECRETS_DIR": filepath.Join(dir, "secrets"),
		},
		Resources:    &driverpb.Resources{CpuShares: 100, MemoryBytes: 128 << 20},
		DriverConfig: dc,
	}
}

// image is the driver config of taskprog with args from the test image.
func (f *fixture) image(args ...string) sdk.ConfigMap {
	return sdk.ConfigMap{"image": sdk.StringValue(testImage), "load": sdk.StringValue(f.archive), "args": sdk.ListValue(args...)}
}

// start starts cfg and destroys it when the test ends.
func (f *fixture) start(t *testing.T, cfg *driverpb.TaskConfig) *driverpb.TaskHandle {
	t.Helper()
	return startOn(t, f.d, cfg)
}

func startOn(t *testing.T, d sdk.Driver, cfg *driverpb.TaskConfig) *driverpb.TaskHandle {
	t.Helper()
	ctx, cancel := testCtx()
	defer cancel()
	h, err := d.StartTask(ctx, cfg)
	if err != nil {
		t.Fatalf("StartTask: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := testCtx()
		defer cancel()
		if err := d.DestroyTask(ctx, cfg.GetId(), true); err != nil && !errors.Is(err, sdk.ErrPluginShutdown) {
			t.Errorf("cleanup: DestroyTask: %v", err)
		}
	})
	return h
}

// run starts cfg and waits for its exit.
func (f *fixture) run(t *testing.T, cfg *driverpb.TaskConfig) *driverpb.ExitResult {
	t.Helper()
	f.start(t, cfg)
	return waitOn(t, f.d, cfg.GetId())
}

func waitOn(t *testing.T, d sdk.Driver, id string) *driverpb.ExitResult {
	t.Helper()
	ctx, cancel := testCtx()
	defer cancel()
	res, err := d.WaitTask(ctx, id)
	if err != nil {
		t.Fatalf("WaitTask: %v", err)
	}
	return res
}

// logs returns what the task wrote to stream ("stdout", "stderr") so far.
func logs(t *testing.T, cfg *driverpb.TaskConfig, stream string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.GetLogDir(), cfg.GetName()+"."+stream+".0"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// runOutput runs taskprog with args and returns its stdout, failing the
// test unless it exits 0.
func (f *fixture) runOutput(t *testing.T, cfg *driverpb.TaskConfig) string {
	t.Helper()
	res := f.run(t, cfg)
	if res.GetExitCode() != 0 || res.GetErr() != "" {
		t.Fatalf("task exited %v; stderr:\n%s", res, logs(t, cfg, "stderr"))
	}
	return logs(t, cfg, "stdout")
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 60s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readyEnv points the task's ready file (taskprog's run, ignore and mount
// modes create it) into its local dir, /local inside, and returns its
// host path for waitFile.
func readyEnv(cfg *driverpb.TaskConfig) string {
	host := filepath.Join(cfg.GetEnv()["BERTH_TASK_DIR"], "ready")
	cfg.Env["DRIVERTEST_READY_FILE"] = "/local/ready"
	return host
}

func lines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
