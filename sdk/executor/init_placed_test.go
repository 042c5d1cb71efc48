package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pivoted reports whether process pid's root mount is a bind of a
// directory named root (the task's root after pivot_root), not the host's.
func pivoted(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == "/" {
			return f[3] != "/" && strings.HasSuffix(f[3], "/root")
		}
	}
	return false
}

// The init builds the task's root while the executor is still putting it
// in the task's cgroups, and forks the task only after: with the second
// cgroup.procs write held (a FIFO nobody reads yet), the init has pivoted
// into the task's root and has no child.
func TestInitBuildsTheRootWhileItJoinsItsCgroups(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	spec := isoSpec(t, dir, `touch /tmp/ready; exec sleep 1000`)
	var fifos []string
	for _, name := range []string{"a.procs", "b.procs"} {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
		fifos = append(fifos, p)
	}
	spec.Isolation.CgroupProcs = fifos
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	type started struct {
		p   *Process
		err error
	}
	done := make(chan started, 1)
	go func() {
		p, err := Start(ctxT(t), self, spec, nil)
		done <- started{p, err}
	}()
	data, err := os.ReadFile(fifos[0]) // the first write: the init's PID
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(generous)
	for !pivoted(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("init %d did not build the task's root while its cgroups were being written", pid)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if kids := initKids(pid); len(kids) != 0 {
		t.Fatalf("init %d forked %v before it was in every cgroup", pid, kids)
	}
	select {
	case s := <-done:
		t.Fatalf("Start returned (%v) before the init was in every cgroup", s.err)
	default:
	}
	if _, err := os.ReadFile(fifos[1]); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() { s.p.Kill(); s.p.Close() })
	waitFileT(t, filepath.Join(dir, "root", "tmp", "ready"))
}

// An init whose placement fails forks nothing and the start fails with
// the cgroup's error.
func TestInitNotPlacedForksNothing(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	spec := isoSpec(t, dir, `touch /tmp/ran; exec sleep 1000`)
	spec.Isolation.CgroupProcs = []string{filepath.Join(dir, "no-such-cgroup", "cgroup.procs")}
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(ctxT(t), self, spec, nil)
	if err == nil {
		p.Kill()
		p.Close()
		t.Fatal("Start succeeded with a cgroup.procs that does not exist")
	}
	if !strings.Contains(err.Error(), "join cgroup") {
		t.Errorf("Start = %v, want the cgroup's error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "root", "tmp", "ran")); err == nil {
		t.Error("the task ran although its init was not placed")
	}
}

// initKids are the children of pid's threads.
func initKids(pid int) []string {
	var kids []string
	threads, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, th := range threads {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + th.Name() + "/children")
		kids = append(kids, strings.Fields(string(data))...)
	}
	return kids
}
