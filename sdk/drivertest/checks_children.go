package drivertest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// checkChildGoneAtExit: an exit from WaitTask means no process of the task
// runs any more (sdk.TaskLifecycle.WaitTask), children included: the
// client unpublishes the task's volumes on it, before DestroyTask.
func checkChildGoneAtExit(t *testing.T, s *suite) {
	if s.h.Cases.WithChild == nil {
		t.Skip("Cases.WithChild not provided")
	}
	d := s.driver
	token := fmt.Sprintf("1000.%06d%03d", os.Getpid()%1000000, s.seq.Add(1)%1000)
	cfg := s.task(t, s.h.Cases.WithChild(token))
	s.startReady(t, d, cfg)
	deadline := time.Now().Add(s.h.Timeout)
	for len(liveWithLastArg(t, token)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no process whose last argument is %q within %s: the case did not start its child", token, s.h.Timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := d.StopTask(ctx, cfg.GetId(), s.h.Timeout, "SIGTERM"); err != nil {
		t.Fatalf("StopTask: %v", err)
	}
	s.wait(t, d, cfg.GetId())
	if pids := liveWithLastArg(t, token); len(pids) > 0 {
		t.Fatalf("the task's child (pids %v) still runs after WaitTask returned its exit", pids)
	}
}

// liveWithLastArg returns the PIDs of the processes (zombies aside: they
// hold nothing) whose command line's last argument is arg.
func liveWithLastArg(t *testing.T, arg string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		args := bytes.Split(bytes.TrimSuffix(cmdline, []byte{0}), []byte{0})
		if string(args[len(args)-1]) != arg {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// The state follows the command name's closing parenthesis.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, filepath.Base(dir))
	}
	return out
}
