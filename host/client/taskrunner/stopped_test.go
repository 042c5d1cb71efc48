package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// slowDestroyDriver's DestroyTask waits until released (or its ctx ends).
type slowDestroyDriver struct {
	*fakeDriver
	destroying chan string
	release    chan struct{}
	once       sync.Once
	// waitErr, if set, is what WaitTask returns instead of an exit.
	waitErr error
}

// newSlowDestroyDriver returns a driver whose destroys are released at
// the test's end at the latest.
func newSlowDestroyDriver(t *testing.T) *slowDestroyDriver {
	d := &slowDestroyDriver{fakeDriver: newFakeDriver(), destroying: make(chan string, 1), release: make(chan struct{})}
	t.Cleanup(d.releaseAll)
	return d
}

func (d *slowDestroyDriver) releaseAll() { d.once.Do(func() { close(d.release) }) }

func (d *slowDestroyDriver) WaitTask(ctx context.Context, id string) (*driverpb.ExitResult, error) {
	res, err := d.fakeDriver.WaitTask(ctx, id)
	if err == nil && d.waitErr != nil {
		return nil, d.waitErr
	}
	return res, err
}

func (d *slowDestroyDriver) DestroyTask(ctx context.Context, id string, force bool) error {
	select {
	case d.destroying <- id:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-d.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.fakeDriver.DestroyTask(ctx, id, force)
}

func within(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not after 10 s", what)
	}
}

// A killed task is stopped (dead, its finished hooks run) while its driver
// still forgets the last attempt: what waits for the stop (the alloc's
// volume unpublish) does not wait for the driver's bookkeeping. Run is
// done, and the record stops naming the attempt, only once DestroyTask
// returned.
func TestKilledTaskStopsBeforeItsDriverForgetsTheAttempt(t *testing.T) {
	d := newSlowDestroyDriver(t)
	hooks := &endHook{}
	type record struct {
		state  pb.TaskLifecycleState
		taskID string
	}
	records := make(chan record, 100)
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Hooks = append(c.Hooks, hooks)
		c.OnState = func(st *pb.TaskState, id string) error {
			records <- record{st.GetState(), id}
			return nil
		}
	})
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	id := d.started()[0].GetId()
	tr.SignalKill("stop")
	within(t, tr.Stopped(), "Stopped with DestroyTask held")
	if st := tr.State(); st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("stopped, state %v, want dead", st)
	}
	if n := countOf(hooks.log.get(), "finished"); n != 1 {
		t.Fatalf("finished hooks ran %d times before Stopped, want 1", n)
	}
	select {
	case got := <-d.destroying:
		if got != id {
			t.Fatalf("DestroyTask of %q, want %q", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DestroyTask never called after Stopped")
	}
	select {
	case <-tr.Done():
		t.Fatal("Done before DestroyTask returned")
	default:
	}
	// Every record so far still names the attempt: a client stopping now
	// destroys it when it restores the task.
	for len(records) > 0 {
		if r := <-records; r.state == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD && r.taskID != id {
			t.Fatalf("dead record names attempt %q before its DestroyTask returned, want %q", r.taskID, id)
		}
	}
	d.releaseAll()
	within(t, tr.Done(), "Done after DestroyTask returned")
	var last record
	for len(records) > 0 {
		last = <-records
	}
	if last.state != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || last.taskID != "" {
		t.Fatalf("last record %+v, want dead naming no attempt", last)
	}
}

// An attempt that ends without a kill (a restart) is destroyed before the
// next one starts, as before.
func TestRestartedAttemptIsDestroyedBeforeTheNextStart(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, nil)
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	if err := tr.Restart("again"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(d.started()) < 2 || tr.State().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return errors.New("not restarted")
		}
		return nil
	})
	tr.SignalKill("bye")
	waitRunDone(t, tr)
	s := d.started()
	d.mu.Lock()
	defer d.mu.Unlock()
	want := []string{"start " + s[0].GetId(), "destroy " + s[0].GetId(), "start " + s[1].GetId(), "destroy " + s[1].GetId()}
	if !slices.Equal(d.calls, want) {
		t.Fatalf("driver calls %q, want %q", d.calls, want)
	}
}

// A task restored dead whose record still names an attempt (the client
// stopped between the kill and the driver forgetting it) has that attempt
// destroyed (given to the driver first when a handle names it: a fresh
// plugin destroys it as its own, not as an orphan), nothing started, and
// its last record names no attempt.
func TestRestoredDeadTaskNamingAnAttemptIsDestroyed(t *testing.T) {
	for name, tc := range map[string]struct {
		r        *Restore
		recovers []string
	}{
		"record only": {r: &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD}, TaskID: "a1.web.old"}},
		"with handle": {r: &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD}, TaskID: "a1.web.old",
			Handle: &driverpb.TaskHandle{Driver: "fake", Config: &driverpb.TaskConfig{Id: "a1.web.old"}}},
			recovers: []string{"a1.web.old"}},
		"with handle of a gone task": {r: &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD}, TaskID: "a1.web.old",
			Handle: &driverpb.TaskHandle{Driver: "fake", Config: &driverpb.TaskConfig{Id: "a1.web.old"}}},
			recovers: []string{"a1.web.old"}},
	} {
		t.Run(name, func(t *testing.T) {
			d := newFakeDriver()
			if name == "with handle of a gone task" {
				d.recoverErr = fmt.Errorf("recover: %w", sdk.ErrTaskNotFound)
			}
			var mu sync.Mutex
			last := "unset"
			tr := newRunner(t, d, nil, func(c *Config) {
				c.Restore = tc.r
				c.OnState = func(_ *pb.TaskState, id string) error {
					mu.Lock()
					last = id
					mu.Unlock()
					return nil
				}
			})
			go tr.Run()
			waitRunDone(t, tr)
			d.mu.Lock()
			defer d.mu.Unlock()
			if !slices.Equal(d.calls, []string{"destroy a1.web.old"}) {
				t.Fatalf("driver calls %q, want a1.web.old destroyed and nothing started", d.calls)
			}
			if !slices.Equal(d.recovers, tc.recovers) {
				t.Fatalf("recovered %q before the destroy, want %q", d.recovers, tc.recovers)
			}
			mu.Lock()
			defer mu.Unlock()
			if last != "" {
				t.Fatalf("last record names attempt %q, want none", last)
			}
		})
	}
}

// The attempt a restored dead task's record names is destroyed before
// Stopped: the new runner cannot know that attempt's processes are gone.
func TestRestoredDeadTaskIsDestroyedBeforeItIsStopped(t *testing.T) {
	d := newSlowDestroyDriver(t)
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD}, TaskID: "a1.web.old"}
	})
	go tr.Run()
	select {
	case <-d.destroying:
	case <-tr.Stopped():
		t.Fatal("stopped before the restored attempt's DestroyTask was called")
	case <-time.After(10 * time.Second):
		t.Fatal("DestroyTask never called")
	}
	select {
	case <-tr.Stopped():
		t.Fatal("stopped while the restored attempt's DestroyTask is held")
	default:
	}
	d.releaseAll()
	within(t, tr.Stopped(), "Stopped after DestroyTask returned")
	waitRunDone(t, tr)
}

// A killed attempt whose WaitTask failed (no exit says its processes are
// gone) is destroyed, killed and waited for, before Stopped.
func TestKilledTaskWhoseWaitFailedIsDestroyedBeforeItIsStopped(t *testing.T) {
	d := newSlowDestroyDriver(t)
	d.waitErr = errors.New("plugin lost the task")
	tr := newRunner(t, d, nil, nil)
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	tr.SignalKill("stop")
	select {
	case <-d.destroying:
	case <-tr.Stopped():
		t.Fatal("stopped before DestroyTask of an attempt whose WaitTask failed")
	case <-time.After(10 * time.Second):
		t.Fatal("DestroyTask never called")
	}
	select {
	case <-tr.Stopped():
		t.Fatal("stopped while DestroyTask of an attempt whose WaitTask failed is held")
	default:
	}
	d.releaseAll()
	within(t, tr.Stopped(), "Stopped after DestroyTask returned")
	waitRunDone(t, tr)
}

// Shutdown leaves a running task running: Stopped is not closed, only
// Done.
func TestShutdownOfARunningTaskDoesNotStopIt(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, nil)
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	tr.Shutdown()
	select {
	case <-tr.Stopped():
		t.Fatal("Stopped closed by a Shutdown that left the task running")
	default:
	}
	if st := tr.State().GetState(); st != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
		t.Fatalf("state %v after Shutdown, want running", st)
	}
}

func countOf(calls []string, s string) int {
	n := 0
	for _, c := range calls {
		if c == s {
			n++
		}
	}
	return n
}
