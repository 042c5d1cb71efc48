package ctrdriver_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"berth.dev/berth/sdk/driverpb"
)

// Two tasks binding one host dir host-to-task both use its shared mount
// point: destroying the task that made it shared leaves it for the other
// (a mount made on the host under it still reaches that task); destroying
// the last user makes it private again.
func TestSharedMountPointLastsUntilItsLastUserGoes(t *testing.T) {
	f := newFixture(t)
	host, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(host, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func() *driverpb.TaskConfig {
		cfg := f.task(t, f.image("run"))
		cfg.Mounts = []*driverpb.Mount{{HostPath: host, TaskPath: "/vol", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK}}
		ready := readyEnv(cfg)
		f.start(t, cfg)
		waitFile(t, ready)
		return cfg
	}
	a, b := start(), start()
	ctx, cancel := testCtx()
	defer cancel()
	if err := f.d.DestroyTask(ctx, a.GetId(), true); err != nil {
		t.Fatal(err)
	}
	if !isMountPoint(t, host) {
		t.Fatalf("%s is no longer a shared mount point while task b still binds it", host)
	}
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(sub, syscall.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(sub, "on-tmpfs"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := f.d.InspectTask(ctx, b.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/proc", st.GetAttributes()["pid"], "root", "vol", "sub", "on-tmpfs")); err != nil {
		t.Errorf("a host mount made after the other user went does not reach task b: %v", err)
	}
	if err := syscall.Unmount(sub, syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DestroyTask(ctx, b.GetId(), true); err != nil {
		t.Fatal(err)
	}
	if isMountPoint(t, host) {
		t.Errorf("%s is still a shared mount point after its last user went", host)
	}
}

// A shared mount point berth made that is busy when its last user goes (a
// mount below it: a volume a CSI plugin staged under its volume dir)
// stays berth's: the next task using the dir inherits it, and when that
// task goes, with nothing mounted below any more, it is released.
func TestBusySharedMountPointIsReleasedByItsNextLastUser(t *testing.T) {
	f := newFixture(t)
	host, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(host, "staged")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(sub, syscall.MNT_DETACH) })
	start := func() *driverpb.TaskConfig {
		cfg := f.task(t, f.image("run"))
		cfg.Mounts = []*driverpb.Mount{{HostPath: host, TaskPath: "/csi", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL}}
		ready := readyEnv(cfg)
		f.start(t, cfg)
		waitFile(t, ready)
		return cfg
	}
	ctx, cancel := testCtx()
	defer cancel()
	a := start()
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DestroyTask(ctx, a.GetId(), true); err != nil {
		t.Fatal(err)
	}
	if !isMountPoint(t, host) {
		t.Fatalf("%s was released with a mount below it", host)
	}
	b := start()
	if err := syscall.Unmount(sub, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.d.DestroyTask(ctx, b.GetId(), true); err != nil {
		t.Fatal(err)
	}
	if isMountPoint(t, host) {
		t.Errorf("%s is still a shared mount point after the last user of berth's bind went", host)
	}
}
