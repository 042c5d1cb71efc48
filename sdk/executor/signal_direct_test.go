package executor

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/procfs"
)

// The trap script tells the test through FIFOs in the task's /tmp, which
// the test holds open for reading and writing (so the task's write never
// waits for a reader, and the test's read waits for the write).
const trapScript = `trap 'echo > /tmp/termed; exit 7' TERM; echo > /tmp/ready; sleep 600 & wait`

// trapFifos makes the task's /tmp with the FIFOs ready and termed in it,
// open.
func trapFifos(t testing.TB, dir string) (ready, termed *os.File) {
	t.Helper()
	tmp := filepath.Join(dir, "root", "tmp")
	if err := os.MkdirAll(tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	open := func(name string) *os.File {
		path := filepath.Join(tmp, name)
		if err := syscall.Mkfifo(path, 0o666); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return open("ready"), open("termed")
}

// awaitLine waits, for generous at most, for a line written to the FIFO f.
func awaitLine(t testing.TB, f *os.File) {
	t.Helper()
	if err := f.SetReadDeadline(time.Now().Add(generous)); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(f).ReadString('\n'); err != nil {
		t.Fatalf("%s: %v", f.Name(), err)
	}
}

// pending reports whether sig is pending for the process pid as a whole
// (the shared pending set: a stopped process keeps what it was sent).
func pending(t testing.TB, pid int, sig syscall.Signal) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("no ShdPnd in /proc/%d/status", pid)
	return false
}

// stopT sends SIGSTOP to pid, waits until every thread of it is stopped,
// and sends SIGCONT at the end of the test. A process that has not yet
// stopped would take a signal sent after the SIGSTOP first (the kernel
// hands out lower-numbered signals first), so tests that need a signal to
// stay pending wait for the stop itself.
func stopT(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })
	deadline := time.Now().Add(generous)
	for !allThreadsStopped(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within %v of SIGSTOP", pid, generous)
		}
		time.Sleep(time.Millisecond)
	}
}

// allThreadsStopped reports whether every thread of pid is in the stopped
// state ('T' in its stat).
func allThreadsStopped(t testing.TB, pid int) bool {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tids, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		stat, err := os.ReadFile(filepath.Join(dir, tid.Name(), "stat"))
		if err != nil {
			return false // a thread that just ended: look again
		}
		// The state follows the parenthesised command name, which may
		// itself hold spaces or parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// A stop's TERM reaches an isolated task without its namespace init
// running: with the init stopped (SIGSTOP), the task's trap still runs.
// Through the init it would wait for the init to be continued.
func TestIsolatedTaskSignalledWithoutItsInit(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	ready, termed := trapFifos(t, dir)
	p := startT(t, isoSpec(t, dir, trapScript))
	st := p.State()
	if st.Group.Pid <= 0 || st.Group.Pid == st.Task.Pid {
		t.Fatalf("state %+v: want the task's own process as Group, apart from its init", st)
	}
	awaitLine(t, ready)
	stopT(t, st.Task.Pid)
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, termed)
	if err := syscall.Kill(st.Task.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if e := waitT(t, p); e.ExitCode != 7 || e.Signal != 0 {
		t.Errorf("exit after SIGTERM = %+v, want code 7 from the trap", e)
	}
}

// A handle without Group (an executor of an older SDK) is signalled
// through the init, which forwards to the task: with the init stopped, the
// TERM waits at the init, and reaches the task once the init continues.
func TestIsolatedTaskOfAnOlderHandleSignalledThroughItsInit(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	ready, termed := trapFifos(t, dir)
	p := startT(t, isoSpec(t, dir, trapScript))
	awaitLine(t, ready)
	st := p.State()
	st.Group = procfs.Identity{}
	old, err := Recover(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	stopT(t, st.Task.Pid)
	if err := old.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !pending(t, st.Task.Pid, syscall.SIGTERM) {
		t.Fatal("SIGTERM is not pending at the stopped init: the older handle's signal did not go through it")
	}
	if err := syscall.Kill(st.Task.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	awaitLine(t, termed)
	if e := waitT(t, p); e.ExitCode != 7 || e.Signal != 0 {
		t.Errorf("exit after SIGTERM = %+v, want code 7 from the trap", e)
	}
}

// A handle whose Group is not its init's child (a state file that names
// some other group leader) does not signal that process: the signal goes
// through the init, to the task.
func TestIsolatedTaskGroupOfAnotherProcessIsNotSignalled(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	ready, termed := trapFifos(t, dir)
	p := startT(t, isoSpec(t, dir, trapScript))
	awaitLine(t, ready)
	decoy := exec.Command("sleep", "600")
	decoy.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := decoy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		decoy.Process.Kill()
		decoy.Wait()
	}()
	stopT(t, decoy.Process.Pid)
	id, err := procfs.Self(decoy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	st := p.State()
	st.Group = id
	other, err := Recover(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if pending(t, decoy.Process.Pid, syscall.SIGTERM) {
		t.Fatal("a process the handle's Group named, not the init's child, was sent SIGTERM")
	}
	awaitLine(t, termed)
	if e := waitT(t, p); e.ExitCode != 7 || e.Signal != 0 {
		t.Errorf("exit after SIGTERM = %+v, want code 7 from the trap", e)
	}
}
