package ctrdriver_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// launchPlugin starts the driver as a real plugin process, configured
// for the tests' containerd.
func launchPlugin(t *testing.T, addr string) *sdk.DriverPlugin {
	t.Helper()
	p := drivertest.Launch(t, nil)
	ctx, cancel := testCtx()
	defer cancel()
	if err := p.Driver().SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(addr)}); err != nil {
		t.Fatal(err)
	}
	return p
}

// containerdClient is a client of the tests' containerd, in the tests'
// namespace, closed when the test ends.
func containerdClient(t *testing.T, addr string) (*client.Client, context.Context) {
	t.Helper()
	c, err := client.New(addr, client.WithDefaultNamespace(testNamespace))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := testCtx()
	t.Cleanup(cancel)
	return c, namespaces.WithNamespace(ctx, testNamespace)
}

// waitGone waits until process pid no longer exists.
func waitGone(t *testing.T, pid string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join("/proc", pid)); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s did not end within 60s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A container that exits while no plugin runs is reported when a plugin
// recovers it: its exit code (no wait for output that will never come),
// and DestroyTask removes it from containerd.
func TestExitWhilePluginIsDownIsReported(t *testing.T) {
	addr := containerdAddress(t)
	f := &fixture{archive: imageArchive(t)}
	first := launchPlugin(t, addr)
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	h := startOn(t, first.Driver(), cfg)
	waitFile(t, ready)
	ctx, cancel := testCtx()
	defer cancel()
	st, err := first.Driver().InspectTask(ctx, cfg.GetId())
	if err != nil {
		t.Fatal(err)
	}
	pid := st.GetAttributes()["pid"]
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(pid)
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)

	second := launchPlugin(t, addr).Driver()
	if err := second.RecoverTask(ctx, h); err != nil {
		t.Fatalf("RecoverTask: %v", err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	res, err := second.WaitTask(wctx, cfg.GetId())
	if err != nil {
		t.Fatalf("WaitTask of a task that exited while the plugin was down: %v", err)
	}
	if res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("exit %v, want killed by SIGKILL", res)
	}
	if st, err := second.InspectTask(ctx, cfg.GetId()); err != nil || st.GetState() != driverpb.TaskState_TASK_STATE_EXITED {
		t.Errorf("InspectTask: %v, %v; want exited", st, err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := second.DestroyTask(dctx, cfg.GetId(), true); err != nil {
		t.Fatalf("DestroyTask: %v", err)
	}
	c, cctx := containerdClient(t, addr)
	if _, err := c.LoadContainer(cctx, containerIDOf(cfg.GetId())); !errdefs.IsNotFound(err) {
		t.Errorf("container after DestroyTask: %v, want not found", err)
	}
}

// containerIDOf is the driver's container ID of a test task (the tests'
// IDs are valid containerd IDs, so the same).
func containerIDOf(taskID string) string { return taskID }
