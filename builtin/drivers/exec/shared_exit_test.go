package execdriver_test

import (
	"os"
	"path/filepath"
	"testing"

	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"
)

// The self-bind that makes a host-to-task mount's source shared is gone
// once WaitTask returned the task's exit, before DestroyTask: the client
// unpublishes the task's volumes on the exit (a host volume's delete must
// not find the directory busy).
func TestSharedBindGoneAtExit(t *testing.T) {
	d := client(t)
	host := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	isMountPoint := func() bool {
		ms, err := drivertest.ProcMounts("self")
		if err != nil {
			t.Fatal(err)
		}
		_, ok := ms[host]
		return ok
	}
	if isMountPoint() {
		t.Fatalf("%s is a mount point before the task", host)
	}
	cfg := taskCfg(t, "shared-exit", sh(`touch /ready; exec sleep 1000`))
	cfg.Mounts = []*driverpb.Mount{{HostPath: host, TaskPath: "/vol", Propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK}}
	start(t, d, cfg)
	waitFile(t, filepath.Join(cfg.GetTaskDir(), "ready"))
	if !isMountPoint() {
		t.Fatalf("%s is not made shared (a self-bind) for the task's host-to-task mount", host)
	}
	if err := d.StopTask(ctxT(t), cfg.GetId(), generous, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	wait(t, d, cfg.GetId())
	if isMountPoint() {
		t.Fatalf("%s is still a self-bind once WaitTask returned the exit (before DestroyTask)", host)
	}
	if err := d.DestroyTask(ctxT(t), cfg.GetId(), false); err != nil {
		t.Fatal(err)
	}
	if isMountPoint() {
		t.Fatalf("%s is a mount point after DestroyTask", host)
	}
}
