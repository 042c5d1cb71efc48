package executor

import (
	"errors"
	"fmt"
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

// waitChild waits for pid's namespace init (a child running with the
// init's marker: not the short-lived child the Go runtime forks once to
// probe for pidfd support) and returns its pid.
func waitChild(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		// Each thread lists the children it forked.
		var data []byte
		threads, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
		for _, th := range threads {
			b, _ := os.ReadFile(th)
			data = append(append(data, b...), ' ')
		}
		for _, f := range strings.Fields(string(data)) {
			env, _ := os.ReadFile("/proc/" + f + "/environ")
			if strings.Contains(string(env), markerEnv+"="+initValue+"\x00") {
				child, _ := strconv.Atoi(f)
				return child
			}
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

// schedOf reads the nice value and scheduling policy of a thread
// (/proc/PID/task/TID/stat's 19th and 41st fields).
func schedOf(t *testing.T, pid, tid int) (nice, policy int) {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	nice, err = strconv.Atoi(fields[16])
	if err == nil {
		policy, err = strconv.Atoi(fields[38])
	}
	if err != nil {
		t.Fatal(err)
	}
	return nice, policy
}

// An isolated standby and its namespace init wait under SCHED_IDLE, every
// thread of them; the task they run runs as the driver does.
func TestStandbyWaitsIdleAndItsTaskDoesNot(t *testing.T) {
	requireRoot(t)
	sb := newStandbyT(t, true)
	init := waitChild(t, sb.Pid())
	for _, pid := range []int{sb.Pid(), init} {
		tids, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, e := range tids {
			tid, _ := strconv.Atoi(e.Name())
			if _, policy := schedOf(t, pid, tid); policy != unix.SCHED_IDLE {
				t.Errorf("thread %d of %d waits under policy %d, want SCHED_IDLE", tid, pid, policy)
			}
		}
	}
	nice, policy := schedOf(t, os.Getpid(), syscall.Gettid())
	dir := t.TempDir()
	p := startOnT(t, sb, isoSpec(t, dir, `cut -d' ' -f19,41 /proc/self/stat`))
	if e := waitT(t, p); e.ExitCode != 0 {
		t.Fatalf("exit %+v", e)
	}
	if out, want := readLog(t, dir, "t.stdout"), fmt.Sprintf("%d %d\n", nice, policy); out != want {
		t.Errorf("the task runs at nice and policy %q, want %q (the driver's)", out, want)
	}
}

// Taking a standby puts it, and the init it started ahead, back under the
// driver's scheduling before its spec is sent: an idle process on a busy
// machine may not run for a long time, and the start would wait for it.
func TestTakingAStandbyWakesItBeforeItsSpec(t *testing.T) {
	requireRoot(t)
	sb := newStandbyT(t, true)
	init := waitChild(t, sb.Pid())
	defer sb.Close()
	nice, policy := schedOf(t, os.Getpid(), syscall.Gettid())
	if err := wakeProcess(sb.Pid(), sb.back); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{sb.Pid(), init} {
		tids, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, e := range tids {
			tid, _ := strconv.Atoi(e.Name())
			if n, p := schedOf(t, pid, tid); n != nice || p != policy {
				t.Errorf("thread %d of %d at nice %d policy %d after the wake, want %d, %d", tid, pid, n, p, nice, policy)
			}
		}
	}
}

// Closing a standby puts it back under the driver's scheduling before it
// is told to end: idle, on a busy machine, it could outlive the plugin's
// shutdown. The standby is stopped, so it is still there to be looked at
// while Close waits.
func TestClosingAStandbyWakesIt(t *testing.T) {
	requireRoot(t)
	sb := newStandbyT(t, false)
	if sb.back == nil {
		sb.Close()
		t.Skip("this process cannot return from SCHED_IDLE: the standby does not wait idle")
	}
	old := standbyCloseWait
	standbyCloseWait = generous
	t.Cleanup(func() { standbyCloseWait = old })
	nice, policy := schedOf(t, os.Getpid(), syscall.Gettid())
	pid := sb.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		sb.Close()
		close(closed)
	}()
	defer func() {
		syscall.Kill(pid, syscall.SIGCONT)
		<-closed
	}()
	deadline := time.Now().Add(generous)
	for {
		awake := true
		tids, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		for _, e := range tids {
			tid, _ := strconv.Atoi(e.Name())
			if n, p := schedOf(t, pid, tid); n != nice || p != policy {
				awake = false
			}
		}
		if awake && len(tids) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby being closed is still idle after %v", generous)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-closed
	if !gone(pid) {
		t.Errorf("standby %d still there after Close", pid)
	}
}
