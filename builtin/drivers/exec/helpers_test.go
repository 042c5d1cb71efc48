package execdriver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	execdriver "berth.dev/berth/builtin/drivers/exec"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// generous bounds operations that should finish promptly; no test fails
// for being slow within it.
const generous = 60 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

// client is an enabled exec driver over in-process gRPC; its tasks run
// under real executors (this test binary re-executed). It needs root.
func client(t testing.TB) *sdk.DriverClient {
	testutil.RequireRoot(t, "exec isolates tasks with namespaces, mounts and cgroups")
	d := drivertest.InProcess(t, execdriver.New(drivertest.Logger(t)))
	if err := d.SetConfig(ctxT(t), &driverpb.PluginConfig{Values: enabled}); err != nil {
		t.Fatal(err)
	}
	return d
}

func taskCfg(t testing.TB, id string, cfg sdk.ConfigMap) *driverpb.TaskConfig {
	dir := t.TempDir()
	return &driverpb.TaskConfig{
		Id: id, Name: "web", TaskDir: dir, LogDir: filepath.Join(dir, "logs"),
		Env:          map[string]string{"PATH": "/usr/bin:/bin"},
		DriverConfig: cfg,
	}
}

func start(t testing.TB, d sdk.Driver, cfg *driverpb.TaskConfig) *driverpb.TaskHandle {
	t.Helper()
	h, err := d.StartTask(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("StartTask(%s): %v", cfg.GetId(), err)
	}
	t.Cleanup(func() { d.DestroyTask(context.Background(), cfg.GetId(), true) })
	return h
}

func wait(t testing.TB, d sdk.Driver, id string) *driverpb.ExitResult {
	t.Helper()
	res, err := d.WaitTask(ctxT(t), id)
	if err != nil {
		t.Fatalf("WaitTask(%s): %v", id, err)
	}
	return res
}

// waitFile waits for path to exist.
func waitFile(t testing.TB, path string) {
	t.Helper()
	waitFor(t, "file "+path, func() bool { _, err := os.Stat(path); return err == nil })
}

// waitFor waits for cond, failing the test after generous.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stdout returns the task's stdout log so far.
// stdoutOnce waits until the task's stdout holds want (the executor copies
// the task's output to the log file a moment after the task wrote it) or
// generous passes, and returns what it holds then.
func stdoutOnce(t *testing.T, cfg *driverpb.TaskConfig, want string) string {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		data, err := os.ReadFile(filepath.Join(cfg.GetLogDir(), cfg.GetName()+".stdout.0"))
		if err == nil && strings.Contains(string(data), want) || time.Now().After(deadline) {
			return string(data)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stdout(t *testing.T, cfg *driverpb.TaskConfig) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cfg.GetLogDir(), cfg.GetName()+".stdout.0"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func capList(names ...string) *driverpb.ConfigValue { return sdk.ListValue(names...) }
