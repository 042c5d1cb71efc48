package ctrdriver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
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

// isMountPoint reports whether dir is a mount point in the test's mount
// namespace.
func isMountPoint(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines(string(data)) {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// DestroyTask of an ID the plugin does not hold (a plugin died inside
// StartTask; a client restarted with an attempt that has no handle)
// deletes the container containerd has for it, with its snapshot, and
// releases the shared mount point berth made for it.
func TestDestroyOfAnUnknownIDRemovesItsContainer(t *testing.T) {
	f := newFixture(t)
	host, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.task(t, f.image("run"))
	cfg.Mounts = []*driverpb.Mount{{HostPath: host, TaskPath: "/vol", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK}}
	ready := readyEnv(cfg)
	f.start(t, cfg)
	waitFile(t, ready)
	if !isMountPoint(t, host) {
		t.Fatalf("%s is not a shared mount point while the task runs", host)
	}
	other := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	if err := other.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(f.addr)}); err != nil {
		t.Fatal(err)
	}
	if err := other.DestroyTask(ctx, cfg.GetId(), false); !errors.Is(err, sdk.ErrTaskRunning) {
		t.Errorf("DestroyTask(force=false) of a running unknown container: %v, want ErrTaskRunning", err)
	}
	if err := other.DestroyTask(ctx, cfg.GetId(), true); err != nil {
		t.Fatalf("DestroyTask of an unknown ID: %v", err)
	}
	c, cctx := containerdClient(t, f.addr)
	if _, err := c.LoadContainer(cctx, containerIDOf(cfg.GetId())); !errdefs.IsNotFound(err) {
		t.Errorf("container after DestroyTask on another plugin: %v, want not found", err)
	}
	if _, err := c.SnapshotService("overlayfs").Stat(cctx, containerIDOf(cfg.GetId())+"-rootfs"); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot after DestroyTask on another plugin: %v, want not found", err)
	}
	if isMountPoint(t, host) {
		t.Errorf("%s is still a shared mount point after its only task was destroyed", host)
	}
	if res := waitOn(t, f.d, cfg.GetId()); res.GetSignal() != int32(syscall.SIGKILL) {
		t.Errorf("the destroyed container ended %v, want killed", res)
	}
	if err := other.DestroyTask(ctx, "never-started", true); err != nil {
		t.Errorf("DestroyTask of an ID containerd has no container for: %v, want nil", err)
	}
}

// A container whose task containerd lost (a node reboot keeps containers
// and snapshots in /var/lib, not tasks in /run) cannot be recovered:
// RecoverTask deletes it and reports ErrTaskNotFound.
func TestRecoverOfAContainerWithoutATaskRemovesIt(t *testing.T) {
	f := newFixture(t)
	cfg := f.task(t, f.image("run"))
	ready := readyEnv(cfg)
	h := f.start(t, cfg)
	waitFile(t, ready)
	c, cctx := containerdClient(t, f.addr)
	ctr, err := c.LoadContainer(cctx, containerIDOf(cfg.GetId()))
	if err != nil {
		t.Fatal(err)
	}
	proc, err := ctr.Task(cctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Delete(cctx, client.WithProcessKill); err != nil {
		t.Fatal(err)
	}
	other := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	if err := other.SetConfig(ctx, &driverpb.PluginConfig{Values: pluginConfig(f.addr)}); err != nil {
		t.Fatal(err)
	}
	if err := other.RecoverTask(ctx, h); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("RecoverTask of a container without a task: %v, want ErrTaskNotFound", err)
	}
	if _, err := c.LoadContainer(cctx, containerIDOf(cfg.GetId())); !errdefs.IsNotFound(err) {
		t.Errorf("container after a failed RecoverTask: %v, want not found", err)
	}
}
