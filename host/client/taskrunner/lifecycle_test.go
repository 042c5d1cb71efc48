package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/taskdrivers"
)

// The client's drivers tell hooks whether they honour mounts.
var _ runhooks.MountsHonourer = (*taskdrivers.Driver)(nil)

// attemptHook remembers the TaskInfo and the running attempt each
// poststart saw, as a supervisor hook does.
type attemptHook struct {
	mu   sync.Mutex
	info runhooks.TaskInfo
	ids  []string
}

func (h *attemptHook) Name() string { return "attempts" }

func (h *attemptHook) Poststart(_ context.Context, req *runhooks.PoststartRequest) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.info = req.TaskInfo
	h.ids = append(h.ids, req.TaskID)
	return nil
}

func (h *attemptHook) last() (runhooks.TaskInfo, string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ids) == 0 {
		return runhooks.TaskInfo{}, "", 0
	}
	return h.info, h.ids[len(h.ids)-1], len(h.ids)
}

// waitAttempts waits until the hook saw n starts and returns the last.
func (h *attemptHook) waitAttempts(t *testing.T, n int) (runhooks.TaskInfo, string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, _, got := h.last(); got != n {
			return fmt.Errorf("%d starts seen by poststart, want %d", got, n)
		}
		return nil
	})
	info, id, _ := h.last()
	return info, id
}

func eventsOf(st *pb.TaskState, typ string) []*pb.TaskEvent {
	var out []*pb.TaskEvent
	for _, ev := range st.GetEvents() {
		if ev.GetType() == typ {
			out = append(out, ev)
		}
	}
	return out
}

// A hook's failure restart goes through the restart policy: the first is
// within attempts (a "Restarting" event with the policy's delay), the
// second exceeds them and mode fail ends the task failed — the same as two
// crashes would.
func TestHookFailureRestartCountsAgainstThePolicy(t *testing.T) {
	d := newFakeDriver()
	h := &attemptHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 7, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	info, first := h.waitAttempts(t, 1)
	if err := info.Lifecycle.Restart(first, "plugin never became healthy", true); err != nil {
		t.Fatal(err)
	}
	_, second := h.waitAttempts(t, 2)
	if second == first {
		t.Fatalf("the restart reused attempt %q", first)
	}
	st := tr.State()
	sig := eventsOf(st, "Restart Signaled")
	if len(sig) != 1 || sig[0].GetMessage() != "plugin never became healthy" || sig[0].GetDetails()["failure"] != "true" {
		t.Fatalf("Restart Signaled events %v", sig)
	}
	rs := eventsOf(st, "Restarting")
	if len(rs) != 1 || rs[0].GetDetails()["restart_in_ms"] != "7" || rs[0].GetDetails()["reason"] != "restart 1 of 1 in 1m0s" {
		t.Fatalf("Restarting events %v: want one after the policy's 7ms delay, counted 1 of 1", rs)
	}
	if st.GetRestarts() != 1 {
		t.Fatalf("restarts %d, want 1", st.GetRestarts())
	}

	if err := info.Lifecycle.Restart(second, "plugin never became healthy", true); err != nil {
		t.Fatal(err)
	}
	waitRunDone(t, tr)
	st = tr.State()
	if !st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("state %v: want dead and failed after exceeding the policy", st)
	}
	if nr := eventsOf(st, "Not Restarting"); len(nr) != 1 || nr[0].GetDetails()["reason"] != "exceeded 1 restarts in 1m0s and the restart mode is fail" {
		t.Fatalf("Not Restarting events %v", nr)
	}
	if n := len(d.started()); n != 2 {
		t.Fatalf("%d starts, want 2", n)
	}
	if err := info.Lifecycle.Restart(second, "late", true); !errors.Is(err, ErrTaskDead) {
		t.Fatalf("restart of a dead task: %v, want ErrTaskDead", err)
	}
}

// Mode delay: past its attempts, a failure restart waits for the interval
// instead of failing the task.
func TestHookFailureRestartInDelayMode(t *testing.T) {
	d := newFakeDriver()
	h := &attemptHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 0, IntervalMs: 20, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_DELAY}
	})
	go tr.Run()
	info, first := h.waitAttempts(t, 1)
	if err := info.Lifecycle.Restart(first, "unhealthy", true); err != nil {
		t.Fatal(err)
	}
	h.waitAttempts(t, 2)
	rs := eventsOf(tr.State(), "Restarting")
	if len(rs) != 1 || rs[0].GetDetails()["reason"] != "exceeded 0 restarts in 20ms; mode is delay, waiting for the interval to end" {
		t.Fatalf("Restarting events %v", rs)
	}
	if err := tr.Kill(context.Background(), "test over"); err != nil {
		t.Fatal(err)
	}
}

// Without failure a hook's restart is like `alloc restart`: at once and
// uncounted, even under a policy that allows no restart.
func TestHookRestartWithoutFailureIsNotCounted(t *testing.T) {
	d := newFakeDriver()
	h := &attemptHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, nil) // attempts 0, mode fail
	go tr.Run()
	info, first := h.waitAttempts(t, 1)
	if err := info.Lifecycle.Restart(first, "config changed", false); err != nil {
		t.Fatal(err)
	}
	h.waitAttempts(t, 2)
	st := tr.State()
	if rs := eventsOf(st, "Restarting"); len(rs) != 1 || rs[0].GetDetails()["restart_in_ms"] != "0" {
		t.Fatalf("Restarting events %v", rs)
	}
	if st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
		t.Fatalf("state %v", st)
	}
	if err := tr.Kill(context.Background(), "test over"); err != nil {
		t.Fatal(err)
	}
}

// A restart asked for an attempt that is no longer the running one is
// refused, and one left queued for an ended attempt never restarts the
// next: the next attempt keeps running.
func TestHookRestartOfAnEndedAttempt(t *testing.T) {
	d := newFakeDriver()
	h := &attemptHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 5, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	info, first := h.waitAttempts(t, 1)
	d.exitLast(t, 1)
	_, second := h.waitAttempts(t, 2)
	err := info.Lifecycle.Restart(first, "late supervisor", true)
	if !errors.Is(err, ErrTaskNotRunning) {
		t.Fatalf("restart of ended attempt %q: %v, want ErrTaskNotRunning", first, err)
	}
	// A request queued for the first attempt (as if it raced the exit) is
	// dropped by the second attempt's supervision.
	tr.restartCh <- restartRequest{taskID: first, reason: "stale", failure: true}
	if err := info.Lifecycle.Restart(second, "now", false); err != nil {
		t.Fatal(err)
	}
	h.waitAttempts(t, 3)
	st := tr.State()
	var reasons []string
	for _, ev := range eventsOf(st, "Restart Signaled") {
		reasons = append(reasons, ev.GetMessage())
	}
	if !slices.Equal(reasons, []string{"now"}) {
		t.Fatalf("restarts signaled %v, want only the one for the running attempt", reasons)
	}
	if err := tr.Kill(context.Background(), "test over"); err != nil {
		t.Fatal(err)
	}
}

// mountsDriver is a fakeDriver that says whether it honours mounts.
type mountsDriver struct {
	*fakeDriver
	honours bool
}

func (m mountsDriver) HonoursMounts(context.Context) (bool, error) { return m.honours, nil }

// TaskInfo.Driver answers from the driver when it can tell; a driver that
// cannot is unisolated.
func TestTaskInfoDriverHonoursMounts(t *testing.T) {
	for _, c := range []struct {
		name string
		d    Driver
		want bool
	}{
		{"isolating", mountsDriver{newFakeDriver(), true}, true},
		{"unisolated", mountsDriver{newFakeDriver(), false}, false},
		{"silent", newFakeDriver(), false},
		{"unknown driver", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newRunner(t, c.d, nil, nil)
			got, err := tr.currentInfo().Driver.HonoursMounts(context.Background())
			if err != nil || got != c.want {
				t.Fatalf("HonoursMounts = %t, %v; want %t", got, err, c.want)
			}
		})
	}
}

// A recovered attempt (after a client restart) restarted by a hook as a
// failure goes through the restart policy too.
func TestHookFailureRestartOfARecoveredAttempt(t *testing.T) {
	d := newFakeDriver()
	h := &attemptHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING},
			Handle: &driverpb.TaskHandle{Driver: "fake", Config: &driverpb.TaskConfig{Id: "a1.web.old"}}}
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 3, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	info, id := h.waitAttempts(t, 1)
	if id != "a1.web.old" {
		t.Fatalf("poststart saw attempt %q, want the recovered one", id)
	}
	if err := info.Lifecycle.Restart(id, "plugin unhealthy after the restart", true); err != nil {
		t.Fatal(err)
	}
	h.waitAttempts(t, 2)
	if rs := eventsOf(tr.State(), "Restarting"); len(rs) != 1 || rs[0].GetDetails()["restart_in_ms"] != "3" {
		t.Fatalf("Restarting events %v: want the policy's delay", rs)
	}
	if n := len(d.started()); n != 1 {
		t.Fatalf("%d starts after the recovered attempt, want 1", n)
	}
	if err := tr.Kill(context.Background(), "test over"); err != nil {
		t.Fatal(err)
	}
}

// endHook records the stop and finished hooks a task's end runs.
type endHook struct {
	attemptHook
	log hookLog
}

func (h *endHook) Stop(_ context.Context, req *runhooks.StopRequest) error {
	h.log.add(fmt.Sprintf("stop restart=%t", req.Restart))
	return nil
}

func (h *endHook) Finished(context.Context, *runhooks.FinishedRequest) error {
	h.log.add("finished")
	return nil
}

// A requested restart stops the attempt with StopRequest.Restart set and
// runs no finished hook; a kill stops it without, and the finished hooks
// run once, when the task is dead. A task ended by its restart policy
// also finishes once.
func TestFinishedHooksRunOnceWhenTheTaskIsDead(t *testing.T) {
	d := newFakeDriver()
	h := &endHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 5, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	info, first := h.waitAttempts(t, 1)
	if err := info.Lifecycle.Restart(first, "unhealthy", true); err != nil {
		t.Fatal(err)
	}
	h.waitAttempts(t, 2)
	d.exitLast(t, 1) // a crash: restarted, not finished
	h.waitAttempts(t, 3)
	if got := h.log.get(); !slices.Equal(got, []string{"stop restart=true"}) {
		t.Fatalf("hooks across restarts %v, want only the restart's stop", got)
	}
	go func() { _ = tr.Kill(context.Background(), "alloc stopped by the servers") }()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := h.log.get(); len(got) < 2 {
			return fmt.Errorf("hooks %v: the kill's stop has not run", got)
		}
		return nil
	})
	d.exitLast(t, 0)
	waitRunDone(t, tr)
	if got := h.log.get(); !slices.Equal(got, []string{"stop restart=true", "stop restart=false", "finished"}) {
		t.Fatalf("hooks %v, want the kill's stop, then finished once", got)
	}

	d2 := newFakeDriver()
	h2 := &endHook{}
	tr2 := newRunner(t, d2, []runhooks.Hook{h2}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 0, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr2.Run()
	h2.waitAttempts(t, 1)
	d2.exitLast(t, 1)
	waitRunDone(t, tr2)
	if got := h2.log.get(); !slices.Equal(got, []string{"finished"}) {
		t.Fatalf("hooks of a task its restart policy ended %v, want finished once", got)
	}
}

// A task restored dead (the client shut down as it died, so the run that
// saw it die skipped its finished hooks) runs the finished hooks when
// the next client's Run starts: a csi_plugin task's parked registry
// entry is removed then, not only at Destroy.
func TestFinishedHooksRunWhenTheTaskIsRestoredDead(t *testing.T) {
	d := newFakeDriver()
	h := &endHook{}
	tr := newRunner(t, d, []runhooks.Hook{h}, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, Failed: true, StartedAt: 5, FinishedAt: 6}}
	})
	go tr.Run()
	waitRunDone(t, tr)
	if got := h.log.get(); !slices.Equal(got, []string{"finished"}) {
		t.Fatalf("hooks of a task restored dead %v, want finished once", got)
	}
	d.mu.Lock()
	calls := slices.Clone(d.calls)
	d.mu.Unlock()
	if len(calls) != 0 {
		t.Fatalf("driver calls %v for a task restored dead, want none", calls)
	}
}
