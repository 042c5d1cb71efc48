package executor

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func newStandbyT(t *testing.T, isolated bool) *Standby {
	t.Helper()
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := NewStandby(self, isolated)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// startOnT runs spec on sb and checks that sb's process is the task's
// executor.
func startOnT(t *testing.T, sb *Standby, spec Spec) *Process {
	t.Helper()
	p, err := sb.Start(ctxT(t), spec, nil)
	if err != nil {
		t.Fatalf("Standby.Start: %v", err)
	}
	t.Cleanup(func() { p.Kill(); p.Close() })
	if got := p.State().Executor.Pid; got != sb.Pid() {
		t.Fatalf("executor pid %d, want the standby's %d", got, sb.Pid())
	}
	return p
}

// gone reports whether pid no longer names a process.
func gone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// A standby started before its task runs it as Start would: the task's
// exit and output, and the executor's own log from its spec on.
func TestStandbyRunsTheTaskItIsGiven(t *testing.T) {
	sb := newStandbyT(t, false)
	dir := t.TempDir()
	p := startOnT(t, sb, shSpec(t, dir, `echo out; echo err >&2; exit 4`))
	if e := waitT(t, p); e.ExitCode != 4 {
		t.Errorf("exit %+v, want code 4", e)
	}
	if out, err := os.ReadFile(filepath.Join(dir, "logs", "t.stdout.0")); err != nil || string(out) != "out\n" {
		t.Errorf("stdout %q (%v), want out", out, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", executorLog)); err != nil {
		t.Errorf("the executor's log: %v", err)
	}
}

// A standby never used ends when it is closed, and so does the namespace
// init an isolated one started ahead.
func TestUnusedStandbyEndsOnClose(t *testing.T) {
	sb := newStandbyT(t, false)
	pid := sb.Pid()
	sb.Close()
	if !gone(pid) {
		t.Fatalf("standby %d still there after Close", pid)
	}

	requireRoot(t)
	sb = newStandbyT(t, true)
	init := waitChild(t, sb.Pid())
	sb.Close()
	waitGone(t, func() (bool, error) { return !gone(init), nil })
	if !gone(sb.Pid()) {
		t.Fatalf("standby %d still there after Close", sb.Pid())
	}
}

// An isolated standby's namespace init, started ahead, runs the task in
// its own namespaces; a spec without isolation given to it is run as
// Start would, the init discarded.
func TestIsolatedStandbyRunsItsTaskInTheInitStartedAhead(t *testing.T) {
	requireRoot(t)
	sb := newStandbyT(t, true)
	init := waitChild(t, sb.Pid())
	dir := t.TempDir()
	p := startOnT(t, sb, isoSpec(t, dir, `hostname; exit 5`))
	// An isolated task's process, to its executor, is its init.
	if got := p.State().Task.Pid; got != init {
		t.Errorf("the task's init is %d, want %d, started ahead", got, init)
	}
	if e := waitT(t, p); e.ExitCode != 5 {
		t.Errorf("exit %+v, want code 5", e)
	}
	if out := readLog(t, dir, "t.stdout"); out != "isolated-task\n" {
		t.Errorf("task output %q, want the isolated hostname", out)
	}
	waitGone(t, func() (bool, error) { return !gone(init), nil })

	sb = newStandbyT(t, true)
	waitChild(t, sb.Pid())
	dir = t.TempDir()
	p = startOnT(t, sb, shSpec(t, dir, `exit 6`))
	if e := waitT(t, p); e.ExitCode != 6 {
		t.Errorf("exit %+v, want code 6", e)
	}
}

// waitChild waits for the one child of pid (an isolated standby's init)
// and returns its pid.
func waitChild(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if f := strings.Fields(string(data)); len(f) > 0 {
			child, _ := strconv.Atoi(f[0])
			return child
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby %d started no namespace init", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A mount made on the host after an isolated standby started, under a
// private mount (so it does not propagate into the init's namespace), is
// what the task binds: the standby sees its init does not show it, and
// starts a new init that does.
func TestIsolatedStandbyWhoseInitMissesAMountStartsANewOne(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	if err := os.MkdirAll(filepath.Join(private, "vol"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(private, private, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(private, unix.MNT_DETACH) })
	if err := unix.Mount("", private, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	sb := newStandbyT(t, true)
	ahead := waitChild(t, sb.Pid())

	vol := filepath.Join(private, "vol")
	if err := unix.Mount("tmpfs", vol, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(vol, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(vol, "marker"), []byte("on the volume\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startOnT(t, sb, isoSpec(t, t.TempDir()+"/task", `cat /data/marker`, Bind{Source: vol, Target: "/data"}))
	if got := p.State().Task.Pid; got == ahead {
		t.Errorf("the task ran under the init started ahead (%d), which does not see the volume's mount", ahead)
	}
	if e := waitT(t, p); e.ExitCode != 0 {
		t.Errorf("exit %+v, want 0 (the marker read through the bind)", e)
	}
}
