package execdriver

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk/driverpb"
)

// TestReleaseLeavesCgroupRemovalToTheBackground: Release (DestroyTask's
// clean-up, once the task's processes are gone) returns while the cgroup
// removal still runs, so a job stop's unpublish does not wait for it; the
// removal's failure is still logged with the task's ID.
func TestReleaseLeavesCgroupRemovalToTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		d := New(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}))
		unblock := make(chan struct{})
		d.removeCgroup = func(string) error {
			<-unblock
			return errors.New("device or resource busy")
		}
		cfg := &driverpb.TaskConfig{Id: "task-1", TaskDir: t.TempDir()}
		returned := make(chan error, 1)
		go func() { returned <- (&flavor{d: d}).Release(cfg) }()
		synctest.Wait() // every goroutine done or blocked: the removal is
		select {
		case err := <-returned:
			if err != nil {
				t.Errorf("Release = %v", err)
			}
		default:
			t.Error("Release waits for the cgroup removal")
		}
		close(unblock)
		d.waitReleases()
		for _, want := range []string{"task clean-up failed", "task-1", "device or resource busy"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, logs.String())
			}
		}
	})
}

// TestRestartWaitsForTheOldCgroupRemoval: a task started again under an
// ID whose cgroup removal is under way waits for it (cgroupReleased, which
// Prepare calls before creating the cgroup), so the old removal cannot
// take the new task's cgroup; another ID does not wait.
func TestRestartWaitsForTheOldCgroupRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := New(hclog.NewNullLogger())
		unblock := make(chan struct{})
		var removed atomic.Bool
		d.removeCgroup = func(string) error {
			<-unblock
			removed.Store(true)
			return nil
		}
		d.releaseCgroup("task-1")
		released := make(chan struct{})
		go func() {
			d.cgroupReleased("task-1")
			close(released)
		}()
		d.cgroupReleased("task-2")
		synctest.Wait()
		select {
		case <-released:
			t.Fatal("cgroupReleased returned while the removal was under way")
		default:
		}
		close(unblock)
		<-released
		if !removed.Load() {
			t.Error("cgroupReleased returned before the removal ended")
		}
		d.waitReleases()
	})
}

// TestShutdownWaitsForRemovals: the plugin's Shutdown returns once the
// cgroup removals under way are done, and no later than its context's
// end, naming the tasks whose removal is then still running.
func TestShutdownWaitsForRemovals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		d := New(hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}))
		unblock := make(chan struct{})
		var removed atomic.Int32
		d.removeCgroup = func(string) error {
			<-unblock
			removed.Add(1)
			return nil
		}
		d.releaseCgroup("task-1")
		d.releaseCgroup("task-2")

		// Removals that end in time: Shutdown waits for both.
		returned := make(chan struct{})
		go func() {
			d.Shutdown(context.Background())
			close(returned)
		}()
		synctest.Wait()
		select {
		case <-returned:
			t.Fatal("Shutdown returned while removals were under way")
		default:
		}
		close(unblock)
		<-returned
		if removed.Load() != 2 {
			t.Errorf("%d removals done when Shutdown returned, want 2", removed.Load())
		}

		// A removal that does not end: Shutdown gives up at its deadline.
		stuck := make(chan struct{})
		d.removeCgroup = func(string) error { <-stuck; return nil }
		d.releaseCgroup("task-3")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		d.Shutdown(ctx)
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("Shutdown waited %v for a stuck removal, want its 1s deadline", waited)
		}
		if !strings.Contains(logs.String(), "task-3") || strings.Contains(logs.String(), "task-1") {
			t.Errorf("log should name task-3 only as still being removed:\n%s", logs.String())
		}
		close(stuck)
		d.waitReleases()
	})
}

// TestParseOOMKill: the oom_kill count of v2's memory.events and v1's
// memory.oom_control; none (an old kernel) is 0; a bad value is an error.
func TestParseOOMKill(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{"low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n", 2, false},
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", 7, false},
		{"oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"oom_kill x\n", 0, true},
	} {
		got, err := parseOOMKill([]byte(c.in))
		if got != c.want || (err != nil) != c.err {
			t.Errorf("parseOOMKill(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.err)
		}
	}
}
