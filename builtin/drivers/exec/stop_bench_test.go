package execdriver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

// BenchmarkStopPath measures an exec task's stop as a job stop drives it,
// over the in-process plugin: a shell trapping TERM (as issue 26's
// consumer), StopTask → WaitTask returned (the signal, the trap, the
// init's reaping of its PID namespace, the executor's report) and
// WaitTask → DestroyTask returned (what the volume's unpublish waits for
// after the exit), medians reported as metrics. The cgroup's removal is
// waited for after each iteration, outside the timed steps.
func BenchmarkStopPath(b *testing.B) {
	testutil.RequireRoot(b, "exec isolates tasks with namespaces, mounts and cgroups")
	d := client(b)
	var exited, destroyed []time.Duration
	for i := range b.N {
		cfg := taskCfg(b, "stop-"+strconv.Itoa(i), sh(`trap 'exit 0' TERM; touch /ready; sleep 600 & wait`))
		start(b, d, cfg)
		waitFile(b, filepath.Join(cfg.GetTaskDir(), "ready"))
		begin := time.Now()
		if err := d.StopTask(ctxT(b), cfg.GetId(), generous, "SIGTERM"); err != nil {
			b.Fatal(err)
		}
		wait(b, d, cfg.GetId())
		exit := time.Now()
		if err := d.DestroyTask(ctxT(b), cfg.GetId(), true); err != nil {
			b.Fatal(err)
		}
		exited, destroyed = append(exited, exit.Sub(begin)), append(destroyed, time.Since(exit))
		for _, dir := range cgroupDirs(cfg.GetId()) {
			waitFor(b, "cgroup "+dir+" removed", func() bool { _, err := os.Stat(dir); return err != nil })
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(exited), "stop→exited-ms")
	b.ReportMetric(median(destroyed), "exited→destroyed-ms")
}

// BenchmarkStopFloorTrap is BenchmarkStopPath's floor without a driver:
// the same shell started directly (its own process group, no namespaces),
// TERM sent to the group → its exit reaped: the trap's own time.
func BenchmarkStopFloorTrap(b *testing.B) {
	b.Run("plain", func(b *testing.B) { stopFloor(b, 0) })
	// The shell as PID 1 of a PID namespace: its exit kills and reaps the
	// namespace's other processes (the sleep) before it is reaped.
	b.Run("pidns", func(b *testing.B) { stopFloor(b, syscall.CLONE_NEWPID) })
	// And of a mount namespace, a copy of the host's mount table that the
	// kernel unmounts when its last process exits.
	b.Run("pidns+mntns", func(b *testing.B) { stopFloor(b, syscall.CLONE_NEWPID|syscall.CLONE_NEWNS) })
	// And with what an exec task's root adds: its own /proc and a tmpfs,
	// whose superblocks go when the namespace does.
	b.Run("pidns+mntns+proc+tmpfs", func(b *testing.B) {
		stopFloor(b, syscall.CLONE_NEWPID|syscall.CLONE_NEWNS, "mount --make-rprivate / && mount -t proc proc /proc && mount -t tmpfs tmp /mnt && ")
	})
}

func stopFloor(b *testing.B, clone uintptr, setup ...string) {
	testutil.RequireRoot(b, "namespaces")
	var exited []time.Duration
	for range b.N {
		ready := filepath.Join(b.TempDir(), "ready")
		cmd := exec.Command("/bin/sh", "-c", strings.Join(setup, "")+`trap 'exit 0' TERM; touch "$READY"; sleep 600 & wait`)
		cmd.Env = append(os.Environ(), "READY="+ready)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: clone}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		waitFile(b, ready)
		begin := time.Now()
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		cmd.Wait()
		exited = append(exited, time.Since(begin))
	}
	slices.Sort(exited)
	b.ReportMetric(float64(exited[len(exited)/2].Microseconds())/1000, "stop→exited-ms")
}
