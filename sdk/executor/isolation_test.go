package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/internal/testenv"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "needs root: isolated tasks use namespaces, mounts and pivot_root (run the tests as root)")
	}
}

// isoSpec runs script under /bin/sh in an isolated root at dir, with the
// host's system directories bound read-only.
func isoSpec(t testing.TB, dir, script string, binds ...Bind) Spec {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := shSpec(t, dir, script)
	spec.Path, spec.Dir = "sh", "/"
	var env []Bind
	for _, p := range []string{"/bin", "/lib", "/lib64", "/usr", "/etc", "/sbin"} {
		st, err := os.Lstat(p)
		switch {
		case err != nil:
		case st.Mode()&os.ModeSymlink != 0:
			to, _ := os.Readlink(p)
			env = append(env, Bind{Target: p, Symlink: to})
		default:
			env = append(env, Bind{Source: p, Target: p, ReadOnly: true})
		}
	}
	all := append(env, binds...)
	SortBinds(all)
	spec.Isolation = &Isolation{Root: root, Hostname: "isolated-task", Binds: all, Caps: []int{0}}
	return spec
}

func readLog(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "logs", name+".0"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestIsolatedTaskHasItsOwnNamespacesAndRoot(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	spec := isoSpec(t, dir, `echo procs=$(ls -d /proc/[0-9]* | wc -l); hostname; ls /root 2>&1 | head -1; touch /usr/x 2>&1 | head -1; grep CapBnd /proc/self/status; exit 3`)
	p := startT(t, spec)
	e := waitT(t, p)
	out := readLog(t, dir, "t.stdout") + readLog(t, dir, "t.stderr")
	if e.ExitCode != 3 {
		t.Errorf("exit = %+v, want code 3; output:\n%s", e, out)
	}
	// The init, its threads, the shell and the commands of its pipeline:
	// nothing of the host's hundreds of processes.
	var procs int
	if i := strings.Index(out, "procs="); i >= 0 {
		fmt.Sscanf(out[i:], "procs=%d", &procs)
	}
	if procs < 2 || procs > 30 {
		t.Errorf("the task sees %d processes, want its own few:\n%s", procs, out)
	}
	for _, want := range []string{"isolated-task\n", "Read-only file system", "CapBnd:\t0000000000000001"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestIsolatedTaskSignalAndNamespaceDeath(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	// A daemon that escapes the task's process group and session.
	spec := isoSpec(t, dir, `setsid sleep 1000 & echo $! > /tmp/daemon; trap 'exit 7' TERM; touch /tmp/ready; while :; do sleep 0.05; done`)
	p := startT(t, spec)
	ready := filepath.Join(dir, "root", "tmp", "ready")
	deadline := time.Now().Add(generous)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("task never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if e := waitT(t, p); e.ExitCode != 7 || e.Signal != 0 {
		t.Errorf("exit after SIGTERM = %+v, want code 7 from the trap", e)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, ErrExited) {
		t.Errorf("Signal after exit = %v, want ErrExited", err)
	}
}

func TestIsolatedTaskNotFound(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	spec := isoSpec(t, dir, "")
	spec.Path = "no-such-program"
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctxT(t), self, spec, nil)
	var se *StartError
	if !errors.As(err, &se) || se.Kind != StartNotFound {
		t.Fatalf("Start of a missing program = %v, want StartError not-found", err)
	}
}
