package executor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// schedModeEnv runs a test of this file again in a process of its own,
// whose every thread has the scheduling or capabilities a mode gives
// ("set:MODE" to set them, "run:MODE" once set).
const schedModeEnv = "BERTH_TEST_SCHED_MODE"

// inSchedMode runs the calling test in a new process in mode: "nocapnice"
// (root without CAP_SYS_NICE and with RLIMIT_NICE 0, as in a container
// with Docker's default capabilities) or "fifo" (a driver under
// SCHED_FIFO priority 1). It returns true in that process, where the test
// goes on; in the test's own it waits for that process and reports its
// result. Both are set on one locked thread that then executes the test
// binary again: capabilities and scheduling are per thread, and a new
// image's threads all come from that one.
func inSchedMode(t *testing.T, mode string) bool {
	t.Helper()
	switch os.Getenv(schedModeEnv) {
	case "run:" + mode:
		if mode == "nocapnice" {
			var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				t.Fatal(err)
			}
			if data[0].Effective&(1<<unix.CAP_SYS_NICE) != 0 {
				t.Fatal("CAP_SYS_NICE still effective after dropping it from the bounding set")
			}
		}
		return true
	case "set:" + mode:
		runtime.LockOSThread()
		var err error
		switch mode {
		case "nocapnice":
			err = unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_NICE, 0, 0, 0)
			if err == nil {
				err = unix.Setrlimit(unix.RLIMIT_NICE, &unix.Rlimit{})
			}
		case "fifo":
			err = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0)
		}
		if err != nil {
			t.Fatalf("setting up %s: %v", mode, err)
		}
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		env := []string{schedModeEnv + "=run:" + mode}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, schedModeEnv+"=") {
				env = append(env, kv)
			}
		}
		t.Fatal(syscall.Exec(self, []string{self, "-test.run=^" + t.Name() + "$", "-test.v"}, env))
	}
	requireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), schedModeEnv+"=set:"+mode)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Errorf("in a process set to %s: %v\n%s", mode, err, out)
	}
	return false
}

// schedLine is the nice value, real-time priority and policy of this
// thread, as /proc/PID/stat's fields 19, 40 and 41 print them.
func schedLine(t *testing.T) string {
	t.Helper()
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d %d %d\n", a.Nice, a.Priority, a.Policy)
}

// taskSchedOn runs, on sb, a task that prints its nice value, real-time
// priority and policy, and returns them with its executor's pid.
func taskSchedOn(t *testing.T, sb *Standby) (line string, executor int) {
	t.Helper()
	dir := t.TempDir()
	p, err := sb.Start(ctxT(t), shSpec(t, dir, `cut -d' ' -f19,40,41 /proc/self/stat`), nil)
	if err != nil {
		t.Fatalf("Standby.Start: %v", err)
	}
	t.Cleanup(func() { p.Kill(); p.Close() })
	if e := waitT(t, p); e.ExitCode != 0 {
		t.Fatalf("exit %+v", e)
	}
	return readLog(t, dir, "t.stdout"), p.State().Executor.Pid
}

// A driver that is root without CAP_SYS_NICE could make a standby idle but
// not bring it back: its standby (of the kind the exec driver uses, not
// isolated) runs its task at the driver's scheduling all the same.
func TestStandbyTaskRunsAtDriverSchedulingWithoutCapSysNice(t *testing.T) {
	if !inSchedMode(t, "nocapnice") {
		return
	}
	want := schedLine(t)
	sb := newStandbyT(t, false)
	if got, _ := taskSchedOn(t, sb); got != want {
		t.Errorf("the task runs at nice, rt priority, policy %q, want the driver's %q", got, want)
	}
}

// A driver under a real-time policy gets its policy and priority back in
// its standby's task.
func TestStandbyTaskRunsAtDriverRealTimePriority(t *testing.T) {
	if !inSchedMode(t, "fifo") {
		return
	}
	want := schedLine(t)
	if want != "0 1 1\n" {
		t.Fatalf("the test process runs at %q, want SCHED_FIFO priority 1", want)
	}
	sb := newStandbyT(t, false)
	if got, _ := taskSchedOn(t, sb); got != want {
		t.Errorf("the task runs at nice, rt priority, policy %q, want the driver's %q", got, want)
	}
}

// A standby that cannot be brought back to the driver's scheduling is
// discarded, and its task started on a new executor at the driver's.
func TestStandbyNotBroughtBackIsReplaced(t *testing.T) {
	requireRoot(t)
	want := schedLine(t)
	sb := newStandbyT(t, false)
	if sb.back == nil {
		t.Fatal("a root test process with CAP_SYS_NICE did not start its standby idle")
	}
	old := sb.Pid()
	// A return the kernel refuses (a real-time policy at priority 0).
	sb.back = &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO}
	got, ex := taskSchedOn(t, sb)
	if ex == old {
		t.Errorf("the task ran on the standby %d, which is still idle", old)
	}
	if got != want {
		t.Errorf("the task runs at %q, want the driver's %q", got, want)
	}
	if !gone(old) {
		t.Errorf("the standby %d was not ended", old)
	}
}

// A standby that died before it was used does not fail its task: a new
// executor runs it.
func TestDeadStandbyFallsBackToANewExecutor(t *testing.T) {
	sb := newStandbyT(t, false)
	old := sb.Pid()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sb.ex.reaped
	if _, ex := taskSchedOn(t, sb); ex == old {
		t.Errorf("executor %d, the dead standby's", ex)
	}
}

// Close does not wait without end for a standby that does not end on its
// stdin's EOF (an idle one on a busy machine, or a binary that is no
// standby): it kills it after a bound.
func TestStandbyCloseIsBounded(t *testing.T) {
	w := standbyCloseWait
	t.Cleanup(func() { standbyCloseWait = w })
	standbyCloseWait = 0
	sb, err := NewStandby(Command{Path: "/bin/sleep", Args: []string{"600"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	pid := sb.Pid()
	sb.Close()
	<-sb.ex.reaped
	if !gone(pid) {
		t.Errorf("%d still there", pid)
	}
}
