package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth.dev/berth/sdk/internal/testenv"
	"berth.dev/berth/sdk/logrotate"
)

func TestMain(m *testing.M) {
	if Requested() {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

const generous = 60 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	t.Cleanup(cancel)
	return ctx
}

func shSpec(t testing.TB, dir, script string) Spec {
	return Spec{
		Path:     "/bin/sh",
		Args:     []string{"sh", "-c", script},
		Env:      []string{"PATH=/usr/bin:/bin"},
		Dir:      dir,
		Stdout:   logrotate.Config{Dir: filepath.Join(dir, "logs"), Name: "t.stdout"},
		Stderr:   logrotate.Config{Dir: filepath.Join(dir, "logs"), Name: "t.stderr"},
		StateDir: filepath.Join(dir, "state"),
	}
}

func startT(t testing.TB, spec Spec) *Process {
	t.Helper()
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(ctxT(t), self, spec, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { p.Kill(); p.Close() })
	return p
}

func waitT(t testing.TB, p *Process) *Exit {
	t.Helper()
	e, err := p.Wait(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func waitGone(t *testing.T, alive func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		if a, _ := alive(); !a {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("process still alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExitCodeOutputAndNoLeakedFDs(t *testing.T) {
	dir := t.TempDir()
	p := startT(t, shSpec(t, dir, `echo "env=$PATH cwd=$(pwd)"; if [ -e /proc/$$/fd/3 ]; then echo leaked >&2; else echo clean >&2; fi; exit 3`))
	e := waitT(t, p)
	if e.ExitCode != 3 || e.Signal != 0 || e.Err != "" || e.FinishedAt == 0 {
		t.Errorf("exit %+v, want code 3", e)
	}
	out, _ := os.ReadFile(filepath.Join(dir, "logs", "t.stdout.0"))
	if got, want := string(out), "env=/usr/bin:/bin cwd="+dir+"\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	// The executor's status pipe is its fd 3; the task must not inherit it.
	if fd3, _ := os.ReadFile(filepath.Join(dir, "logs", "t.stderr.0")); string(fd3) != "clean\n" {
		t.Errorf("task's fd 3: %q, want clean (the status pipe leaked)", fd3)
	}
}

func TestSignalAndExitedProcess(t *testing.T) {
	p := startT(t, shSpec(t, t.TempDir(), `exec sleep 1000`))
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if e := waitT(t, p); e.Signal != int(syscall.SIGTERM) || e.ExitCode != 128+int(syscall.SIGTERM) {
		t.Errorf("exit %+v, want SIGTERM", e)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, ErrExited) {
		t.Errorf("Signal after exit = %v, want ErrExited", err)
	}
}

func TestRecoverRunningProcess(t *testing.T) {
	dir := t.TempDir()
	first := startT(t, shSpec(t, dir, `while [ ! -e go ]; do sleep 0.02; done; exit 9`))
	state := first.State()
	first.Close() // the driver that started it is gone

	p, err := Recover(state, nil)
	if err != nil {
		t.Fatalf("Recover: %v", err)
	}
	defer p.Close()
	select {
	case <-p.Done():
		t.Fatal("recovered process reports an exit while the task runs")
	default:
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if e := waitT(t, p); e.ExitCode != 9 {
		t.Errorf("recovered exit %+v, want 9", e)
	}
	// Recovering after the exit reports it at once.
	again, err := Recover(state, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-again.Done():
		if e := waitT(t, again); e.ExitCode != 9 {
			t.Errorf("exit %+v", e)
		}
	default:
		t.Error("Recover of a finished task is not done")
	}
}

func TestExecutorDeathTakesTaskAndIsLost(t *testing.T) {
	p := startT(t, shSpec(t, t.TempDir(), `exec sleep 1000`))
	state := p.State()
	if err := syscall.Kill(state.Executor.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e := waitT(t, p)
	if e.ExitCode != -1 || e.Err == "" {
		t.Errorf("exit after the executor died %+v, want -1 with an error", e)
	}
	// The parent-death signal took the task down: nothing runs unsupervised.
	waitGone(t, state.Task.Alive)
	// The executor's pipes close before the kernel finishes its exit, so
	// wait until it is really gone: Recover during that window rightly
	// returns a process that then reports the loss itself.
	waitGone(t, state.Executor.Alive)
	if _, err := Recover(state, nil); !errors.Is(err, ErrLost) {
		t.Errorf("Recover = %v, want ErrLost", err)
	}
}

func TestStartKillsOrphanInSameStateDir(t *testing.T) {
	dir := t.TempDir()
	orphan := startT(t, shSpec(t, dir, `exec sleep 1000`))
	orphan.Close() // its driver died before handing out a handle
	next := startT(t, shSpec(t, dir, `exit 0`))
	waitGone(t, orphan.State().Task.Alive)
	if e := waitT(t, next); e.ExitCode != 0 {
		t.Errorf("new task exit %+v", e)
	}
}

// A task that does not start is a *StartError saying why and naming the
// path, decoded from the executor's report, never from its text.
func TestStartFailureIsReported(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	aFile := filepath.Join(dir, "file")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		path     string
		dir      string
		wantKind StartKind
		wantPath string
	}{
		{"missing program", filepath.Join(dir, "missing"), dir, StartNotFound, filepath.Join(dir, "missing")},
		{"program under a file", filepath.Join(aFile, "x"), dir, StartNotFound, filepath.Join(aFile, "x")},
		{"not executable", notExec, dir, StartPermissionDenied, notExec},
		{"directory as program", dir, dir, StartPermissionDenied, dir},
		{"missing working dir", "/bin/sh", filepath.Join(dir, "nodir"), StartBadWorkingDir, filepath.Join(dir, "nodir")},
		{"working dir is a file", "/bin/sh", aFile, StartBadWorkingDir, aFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := shSpec(t, dir, "exit 0")
			spec.StateDir = filepath.Join(t.TempDir(), "state")
			spec.Path, spec.Dir = tc.path, tc.dir
			self, _ := Self()
			p, err := Start(ctxT(t), self, spec, nil)
			var se *StartError
			if !errors.As(err, &se) {
				if p != nil {
					p.Kill()
				}
				t.Fatalf("Start = %v, want a *StartError", err)
			}
			if se.Kind != tc.wantKind || se.Path != tc.wantPath || se.Detail == "" {
				t.Errorf("StartError %+v, want kind %s, path %s and a detail", se, tc.wantKind, tc.wantPath)
			}
		})
	}
}

// A log that cannot be opened is a start failure of kind other, naming it.
func TestUnopenableLogIsStartFailure(t *testing.T) {
	dir := t.TempDir()
	spec := shSpec(t, dir, "exit 0")
	blocker := filepath.Join(dir, "logs-file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	spec.Stdout.Dir = blocker // a file where the log directory should be
	self, _ := Self()
	_, err := Start(ctxT(t), self, spec, nil)
	var se *StartError
	if !errors.As(err, &se) || se.Kind != StartOther || se.Path != spec.Stdout.Path(0) || se.Detail == "" {
		t.Errorf("Start with an unopenable log = %v, want kind other naming %s", err, spec.Stdout.Path(0))
	}
}

// A stream whose log cannot be written must still be drained: a task
// blocked on a full pipe would never exit.
func TestUnwritableLogDoesNotBlockTask(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		testenv.Unavailable(t, "needs /dev/full: %v", err)
	}
	dir := t.TempDir()
	spec := shSpec(t, dir, `head -c 200000 /dev/zero; echo done >&2; exit 7`)
	spec.Stdout.MaxBytes = 1000
	if err := os.MkdirAll(spec.Stdout.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The stream continues in its newest file, a disk that is always full.
	if err := os.WriteFile(spec.Stdout.Path(0), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", spec.Stdout.Path(1)); err != nil {
		t.Fatal(err)
	}
	p := startT(t, spec)
	if e := waitT(t, p); e.ExitCode != 7 || e.Err != "" {
		t.Errorf("exit %+v, want code 7", e)
	}
	if got, _ := os.ReadFile(spec.Stderr.Path(0)); string(got) != "done\n" {
		t.Errorf("stderr %q, want done", got)
	}
	logged, _ := os.ReadFile(filepath.Join(spec.StateDir, executorLog))
	if !strings.Contains(string(logged), "t.stdout") {
		t.Errorf("executor log does not name the failing stream: %q", logged)
	}
}
