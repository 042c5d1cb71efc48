package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"berth.dev/berth/host/client/taskrunner"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// heldDestroys gives drivers whose DestroyTask waits until released (or
// its ctx ends).
type heldDestroys struct {
	inner      Drivers
	destroying chan string
	release    chan struct{}
	once       *sync.Once
}

// newHeldDestroys holds the destroys of inner's drivers until released,
// at the test's end at the latest.
func newHeldDestroys(t *testing.T, inner Drivers) heldDestroys {
	h := heldDestroys{inner: inner, destroying: make(chan string, 1), release: make(chan struct{}), once: &sync.Once{}}
	t.Cleanup(h.releaseAll)
	return h
}

func (h heldDestroys) releaseAll() { h.once.Do(func() { close(h.release) }) }

func (h heldDestroys) Driver(name string) (taskrunner.Driver, error) {
	d, err := h.inner.Driver(name)
	if err != nil {
		return nil, err
	}
	return heldDestroy{d, h}, nil
}

type heldDestroy struct {
	taskrunner.Driver
	h heldDestroys
}

func (d heldDestroy) DestroyTask(ctx context.Context, id string, force bool) error {
	select {
	case d.h.destroying <- id:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-d.h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return d.Driver.DestroyTask(ctx, id, force)
}

// A stopped alloc's postrun hooks (a volume's unpublish) run once its
// tasks are dead and their processes gone, while the driver still forgets
// the last attempts; the alloc is done only after that too.
func TestPostrunDoesNotWaitForTheDriverToForgetTheTask(t *testing.T) {
	e := newEnv(t)
	log := &callLog{}
	held := newHeldDestroys(t, drivers_{e.m})
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, mockTask("web", nil))
	ar, _ := e.runner(a, j, func(c *Config) {
		c.Drivers = held
		c.Hooks = Hooks{Alloc: []func(runhooks.AllocInfo) runhooks.Hook{
			func(runhooks.AllocInfo) runhooks.Hook { return &recorder{name: "vol", log: log} },
		}}
	})
	t.Cleanup(held.releaseAll) // before the runner's cleanup kills it
	waitTask(t, ar, "web", isRunning)
	stop := proto_clone(a)
	stop.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	stop.AllocModifyIndex = 11
	ar.Update(stop, j)
	select {
	case <-held.destroying:
	case <-time.After(generous):
		t.Fatal("the killed task's attempt was never destroyed")
	}
	testutil.WaitFor(t, generous, func() error {
		if !slices.Contains(log.get(), "vol.postrun") {
			return errors.New("postrun hooks not run while DestroyTask is held")
		}
		return nil
	})
	select {
	case <-ar.Done():
		t.Fatal("alloc done before its task's DestroyTask returned")
	default:
	}
	held.releaseAll()
	waitDone(t, ar)
}

// A client that stopped between a killed task's exit and its driver
// forgetting the attempt restores the task dead with a handle; the next
// client's plugin (a fresh raw_exec, which never saw the task) destroys
// the attempt as its own: recovered from the handle first, so its state
// directory is removed (a destroy of an unknown task would only look for
// an orphan executor to kill, and leave it).
func TestRestoredDeadTaskWithAHandleIsDestroyedByAFreshPlugin(t *testing.T) {
	before := newEnv(t)
	held := newHeldDestroys(t, drivers_{before.m})
	task := &pb.Task{Name: "web", Driver: "raw_exec", Config: sdk.ConfigMap{
		"command": sdk.StringValue("/bin/sh"), "args": sdk.ListValue("-c", "while true; do sleep 0.05; done")}}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, task)
	ar, _ := before.runner(a, j, func(c *Config) { c.Drivers = held })
	t.Cleanup(held.releaseAll) // before the runner's cleanup kills it
	waitTask(t, ar, "web", isRunning)
	stop := proto_clone(a)
	stop.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	stop.AllocModifyIndex = 11
	ar.Update(stop, j)
	var id string
	select {
	case id = <-held.destroying:
	case <-time.After(generous):
		t.Fatal("the killed task's attempt was never destroyed")
	}
	// The client "stops" here: what its state DB holds is what the next
	// one restores.
	states, err := before.db.TaskStates(a.GetId())
	if err != nil || len(states) != 1 {
		t.Fatalf("task states %v, %v", states, err)
	}
	rec := states[0]
	if rec.GetState().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || rec.GetTaskId() != id {
		t.Fatalf("record %v, want dead naming attempt %q", rec, id)
	}
	h, ok, err := before.db.TaskHandle(id)
	if err != nil || !ok {
		t.Fatalf("handle of %q: %v, %v", id, ok, err)
	}
	stateDir := filepath.Join(h.GetHandle().GetConfig().GetTaskDir(), ".rawexec", id)
	if _, err := os.Stat(stateDir); err != nil {
		t.Fatalf("the attempt's executor state dir: %v", err)
	}

	after := newEnv(t)
	restore := map[string]*taskrunner.Restore{"web": {State: rec.GetState(), TaskID: id, Handle: h.GetHandle()}}
	ar2, _ := after.runner(stop, j, func(c *Config) { c.Restore = restore; c.DataDir = before.dataDir })
	waitDone(t, ar2)
	if _, err := os.Stat(stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the attempt's executor state dir after the restore: %v, want it removed", err)
	}
	if _, ok, _ := after.db.TaskHandle(id); ok {
		t.Fatal("the restored attempt's handle is still persisted")
	}
}

// A shut-down alloc runner goes no further once a task it waits for is
// stopped as well: whichever of the two select picks, waitDone says shut
// down (else the lifecycle would run never-started tasks and postrun).
func TestWaitDoneAfterShutdownSaysShutDown(t *testing.T) {
	e := newEnv(t)
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, mockTask("web", nil))
	restore := map[string]*taskrunner.Restore{"web": {State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD}}}
	ar, _ := e.newRunner(a, j, func(c *Config) { c.Restore = restore })
	ar.cancel()
	// Shut down: Run returns at once, closing Done for the cleanup's Kill.
	t.Cleanup(ar.Run)
	if !ar.markStarted("web") {
		t.Fatal("web already started")
	}
	tr := ar.tasks["web"].tr
	tr.Run()
	select {
	case <-tr.Stopped():
	default:
		t.Fatal("a runner restored dead is not stopped after Run")
	}
	for i := range 64 {
		if got := ar.waitDone([]string{"web"}); got != shutDown {
			t.Fatalf("waitDone (try %d) = %v with the runner shut down, want shutDown", i, got)
		}
	}
}

// A client shutting down while its alloc runs, or while the alloc's tasks
// are being stopped, leaves them for the next client: no postrun (a
// volume's unpublish) and no task persisted dead (a poststop task that
// never started must start after the restore).
func TestShutdownOfARunningAllocNeitherUnpublishesNorMarksTasksDead(t *testing.T) {
	for _, stopping := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopping=%t", stopping), func(t *testing.T) {
			e := newEnv(t)
			log := &callLog{}
			main := mockTask("main", sdk.ConfigMap{"ignore_stop_signal": sdk.BoolValue(true)})
			main.KillTimeoutMs = time.Hour.Milliseconds()
			post := mockTask("cleanup", sdk.ConfigMap{"run_for": sdk.DurationValue(10 * time.Millisecond)})
			post.Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_POSTSTOP}
			a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, main, post)
			ar, _ := e.runner(a, j, func(c *Config) {
				c.Hooks = Hooks{Alloc: []func(runhooks.AllocInfo) runhooks.Hook{
					func(runhooks.AllocInfo) runhooks.Hook { return &recorder{name: "vol", log: log} },
				}}
			})
			waitTask(t, ar, "main", isRunning)
			if stopping {
				stop := proto_clone(a)
				stop.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
				stop.AllocModifyIndex = 11
				ar.Update(stop, j)
				waitTask(t, ar, "main", func(st *pb.TaskState) bool { return event(st, "Killing") != nil })
			}
			ar.Shutdown()
			if slices.Contains(log.get(), "vol.postrun") {
				t.Fatal("postrun hooks ran on a shutdown")
			}
			states, err := e.db.TaskStates(a.GetId())
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range states {
				if rec.GetState().GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
					t.Fatalf("task %s persisted dead on a shutdown: %v", rec.GetTask(), rec.GetState())
				}
				if id := rec.GetTaskId(); id != "" {
					// The task ignores SIGTERM: killed now, not by the
					// driver manager's shutdown after its stop timeout.
					drv, err := e.m.Driver("mock")
					if err != nil {
						t.Fatal(err)
					}
					if err := drv.DestroyTask(context.Background(), id, true); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}
