package executor

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/procfs"
)

// waitFileT waits until path exists.
func waitFileT(t testing.TB, path string) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const trapScript = `trap 'touch /tmp/termed; exit 7' TERM; touch /tmp/ready; sleep 600 & wait`

// A stop's TERM reaches an isolated task without its namespace init
// running: with the init stopped (SIGSTOP), the task's trap still runs.
// Through the init it would wait for the init to be continued.
func TestIsolatedTaskSignalledWithoutItsInit(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	p := startT(t, isoSpec(t, dir, trapScript))
	st := p.State()
	if st.Group.Pid <= 0 || st.Group.Pid == st.Task.Pid {
		t.Fatalf("state %+v: want the task's own process as Group, apart from its init", st)
	}
	waitFileT(t, filepath.Join(dir, "root", "tmp", "ready"))
	if err := syscall.Kill(st.Task.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	defer func() {
		if !continued {
			syscall.Kill(st.Task.Pid, syscall.SIGCONT)
		}
	}()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFileT(t, filepath.Join(dir, "root", "tmp", "termed"))
	continued = true
	if err := syscall.Kill(st.Task.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if e := waitT(t, p); e.ExitCode != 7 || e.Signal != 0 {
		t.Errorf("exit after SIGTERM = %+v, want code 7 from the trap", e)
	}
}

// A handle without Group (an executor of an older SDK) is signalled
// through the init, which forwards to the task.
func TestIsolatedTaskOfAnOlderHandleSignalledThroughItsInit(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	p := startT(t, isoSpec(t, dir, trapScript))
	waitFileT(t, filepath.Join(dir, "root", "tmp", "ready"))
	st := p.State()
	st.Group = procfs.Identity{}
	old, err := Recover(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if e := waitT(t, p); e.ExitCode != 7 || e.Signal != 0 {
		t.Errorf("exit after SIGTERM = %+v, want code 7 from the trap", e)
	}
}
