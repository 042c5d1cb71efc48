package containerdtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/ociarchive"
	"berth.dev/berth/internal/testutil"
)

// startOrEnd starts a private daemon, ending the test through
// testutil.Unavailable when containerd cannot run here.
func startOrEnd(t *testing.T) *Daemon {
	t.Helper()
	if _, err := exec.LookPath("ctr"); err != nil {
		testutil.Unavailable(t, "no ctr binary in PATH (Debian's containerd package ships it)")
	}
	d, err := Start(context.Background(), "")
	if Unavailable(err) {
		testutil.Unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestStartAnswersAndStopEndsEverything: a started daemon answers on its
// own socket under its own directory; Stop, with a container still
// running, kills that container and the daemon and removes the directory,
// nothing left mounted.
func TestStartAnswersAndStopEndsEverything(t *testing.T) {
	d := startOrEnd(t)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = d.Stop()
		}
	})
	if !strings.HasPrefix(d.Address, d.Dir+"/") {
		t.Fatalf("socket %s is not under the daemon's directory %s", d.Address, d.Dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := d.Ctr(ctx, "version"); err != nil || !strings.Contains(out, "Server:") {
		t.Fatalf("ctr version: %v\n%s", err, out)
	}
	// The daemon runs with this configuration: its root is ours.
	if _, err := os.Stat(filepath.Join(d.Dir, "root", "io.containerd.content.v1.content")); err != nil {
		t.Fatalf("the daemon's content store is not under its directory: %v", err)
	}

	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	if sleep, err = filepath.EvalSymlinks(sleep); err != nil {
		t.Fatal(err)
	}
	files, err := ociarchive.Executable(sleep, "/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(t.TempDir(), "sleep.tar")
	if err := ociarchive.WriteFile(archive, ociarchive.Image{Name: "berth.test/sleep:1", Files: files}); err != nil {
		t.Fatal(err)
	}
	ns := []string{"--namespace", Namespace}
	if out, err := d.Ctr(ctx, append(ns, "images", "import", archive)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := d.Ctr(ctx, append(ns, "run", "-d", "berth.test/sleep:1", "left-running", "/bin/sleep", "3600")...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := d.Ctr(ctx, append(ns, "tasks", "list")...)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "left-running" {
			pid, _ = strconv.Atoi(f[1])
		}
	}
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		t.Fatalf("the container's task: pid %d, not running (ctr tasks list: %s)", pid, out)
	}
	daemonPID := d.PID()

	stopped = true
	if err := d.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the container's process %d outlived Stop (kill 0: %v)", pid, err)
	}
	if err := syscall.Kill(daemonPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("containerd %d outlived Stop (kill 0: %v)", daemonPID, err)
	}
	if _, err := os.Stat(d.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the daemon's directory %s after Stop: %v", d.Dir, err)
	}
}

// TestStartFailsWithTheLog: a daemon that cannot listen (its socket path is
// a directory) makes Start fail with containerd's own words, and leaves no
// process nor directory.
func TestStartFailsWithTheLog(t *testing.T) {
	testutil.RequireRoot(t, "containerd runs as root")
	if _, err := exec.LookPath("containerd"); err != nil {
		testutil.Unavailable(t, "no containerd binary in PATH")
	}
	dir, err := os.MkdirTemp("", "berth-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(filepath.Join(dir, "containerd.sock", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Start(context.Background(), dir)
	if err == nil {
		d.Stop()
		t.Fatal("Start succeeded with its socket path taken by a directory")
	}
	if Unavailable(err) || !strings.Contains(err.Error(), "containerd exited before it listened") || !strings.Contains(err.Error(), "containerd.log") {
		t.Fatalf("Start: %v; want the daemon's exit with its log", err)
	}
}
