package executor

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A standby whose binary does not know it was started as one (built with
// an SDK older than standbys: it runs its own main, and never reports)
// does not hang its task's start: with no ready byte within the bound the
// task runs on a new executor.
func TestStandbyOfAnOlderSDKFallsBack(t *testing.T) {
	w := standbyReadyWait
	t.Cleanup(func() { standbyReadyWait = w })
	standbyReadyWait = 0
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Started as a standby it sleeps, as an old binary's main would run;
	// started as an executor it is this test binary, which is one.
	script := filepath.Join(t.TempDir(), "old-helper")
	body := "#!/bin/sh\nif [ \"$" + markerEnv + "\" = " + standbyValue + " ]; then exec sleep 600; fi\nexec " + self + " \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := NewStandby(Command{Path: script}, false)
	if err != nil {
		t.Fatal(err)
	}
	old := sb.Pid()
	dir := t.TempDir()
	p, err := sb.Start(ctxT(t), shSpec(t, dir, `exit 3`), nil)
	if err != nil {
		t.Fatalf("Standby.Start: %v", err)
	}
	t.Cleanup(func() { p.Kill(); p.Close() })
	if e := waitT(t, p); e.ExitCode != 3 {
		t.Errorf("exit %+v, want 3", e)
	}
	if p.State().Executor.Pid == old {
		t.Errorf("the task ran on the old binary's process %d", old)
	}
	<-sb.ex.reaped
}

// ExecutorLog is Standby.Start's to set: a caller's is refused, not
// silently ignored.
func TestExecutorLogSetByCallerIsRefused(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	spec := shSpec(t, dir, `true`)
	spec.ExecutorLog = filepath.Join(dir, "mine.log")
	if _, err := Start(ctxT(t), self, spec, nil); !errors.Is(err, errExecutorLogSet) {
		t.Errorf("Start: %v, want errExecutorLogSet", err)
	}
	sb := newStandbyT(t, false)
	if _, err := sb.Start(ctxT(t), spec, nil); !errors.Is(err, errExecutorLogSet) {
		t.Errorf("Standby.Start: %v, want errExecutorLogSet", err)
	}
}
