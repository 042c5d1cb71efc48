package execdriver

import (
	"bytes"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

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
