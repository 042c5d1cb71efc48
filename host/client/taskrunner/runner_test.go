package taskrunner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/allocdir"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// fakeDriver runs tasks that exit when told (exit) or stopped.
type fakeDriver struct {
	mu         sync.Mutex
	starts     []*driverpb.TaskConfig
	recovers   []string
	destroys   []string
	stops      []string // "taskID signal timeout"
	calls      []string // "start taskID" and "destroy taskID", in order
	startErr   error
	recoverErr error
	exits      map[string]chan *driverpb.ExitResult
}

var _ Driver = (*fakeDriver)(nil)

func newFakeDriver() *fakeDriver { return &fakeDriver{exits: map[string]chan *driverpb.ExitResult{}} }

func (f *fakeDriver) ch(id string) chan *driverpb.ExitResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exits[id] == nil {
		f.exits[id] = make(chan *driverpb.ExitResult, 1)
	}
	return f.exits[id]
}

func (f *fakeDriver) StartTask(_ context.Context, cfg *driverpb.TaskConfig) (*driverpb.TaskHandle, error) {
	f.mu.Lock()
	f.starts = append(f.starts, cfg)
	f.calls = append(f.calls, "start "+cfg.GetId())
	err := f.startErr
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	f.ch(cfg.GetId())
	return &driverpb.TaskHandle{Driver: "fake", Config: cfg}, nil
}

func (f *fakeDriver) WaitTask(ctx context.Context, id string) (*driverpb.ExitResult, error) {
	select {
	case r := <-f.ch(id):
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeDriver) StopTask(_ context.Context, id string, timeout time.Duration, signal string) error {
	f.mu.Lock()
	f.stops = append(f.stops, fmt.Sprintf("%s %s %s", id, signal, timeout))
	f.mu.Unlock()
	select {
	case f.ch(id) <- &driverpb.ExitResult{ExitCode: 143, Signal: 15}:
	default:
	}
	return nil
}

func (f *fakeDriver) DestroyTask(_ context.Context, id string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.destroys = append(f.destroys, id)
	f.calls = append(f.calls, "destroy "+id)
	return nil
}

func (f *fakeDriver) RecoverTask(_ context.Context, h *driverpb.TaskHandle) error {
	f.mu.Lock()
	f.recovers = append(f.recovers, h.GetConfig().GetId())
	err := f.recoverErr
	f.mu.Unlock()
	if err == nil {
		f.ch(h.GetConfig().GetId())
	}
	return err
}

func (f *fakeDriver) started() []*driverpb.TaskConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.starts)
}

// exitLast makes the last started attempt exit with code.
func (f *fakeDriver) exitLast(t *testing.T, code int32) {
	t.Helper()
	s := f.started()
	if len(s) == 0 {
		t.Fatal("nothing started")
	}
	f.ch(s[len(s)-1].GetId()) <- &driverpb.ExitResult{ExitCode: code}
}

// hookLog records hook calls.
type hookLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *hookLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *hookLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

type allHooks struct {
	log         *hookLog
	prestartErr error
	timeout     time.Duration
	block       bool
}

func (h *allHooks) Name() string           { return "rec" }
func (h *allHooks) Timeout() time.Duration { return h.timeout }
func (h *allHooks) Prestart(ctx context.Context, req *runhooks.PrestartRequest, resp *runhooks.PrestartResponse) error {
	h.log.add(fmt.Sprintf("prestart recovered=%t attempt=%d", req.Recovered, req.Attempt))
	if h.block {
		<-ctx.Done()
		return ctx.Err()
	}
	resp.Env = map[string]string{"HOOK": "yes", "BERTH_TASK_NAME": "overridden"}
	return h.prestartErr
}
func (h *allHooks) Poststart(_ context.Context, req *runhooks.PoststartRequest) error {
	h.log.add(fmt.Sprintf("poststart recovered=%t", req.Recovered))
	return nil
}
func (h *allHooks) Stop(context.Context, *runhooks.StopRequest) error { h.log.add("stop"); return nil }
func (h *allHooks) Exited(context.Context, *runhooks.ExitedRequest) error {
	h.log.add("exited")
	return nil
}
func (h *allHooks) Destroy(context.Context, *runhooks.TaskDestroyRequest) error {
	h.log.add("destroy")
	return nil
}

func newRunner(t *testing.T, d Driver, hooks []runhooks.Hook, tweak func(*Config)) *TaskRunner {
	t.Helper()
	ad, err := allocdir.New(t.TempDir(), "a1")
	if err != nil {
		t.Fatal(err)
	}
	td, _ := ad.TaskDir("web")
	cfg := Config{
		Info: runhooks.TaskInfo{Alloc: &pb.Allocation{Id: "a1"}, Job: &pb.Job{Id: "j"}, Group: &pb.TaskGroup{Name: "g"},
			Task: &pb.Task{Name: "web", Driver: "fake", Resources: &pb.TaskResources{CpuMhz: 500, MemoryMb: 10},
				Config: sdk.ConfigMap{"arg": sdk.StringValue("${BERTH_ALLOC_ID}-${HOOK}")}}, Dir: td},
		Driver: d, Hooks: hooks, JobType: pb.JobType_JOB_TYPE_SERVICE, MHzPerCore: 2000,
		Restart: &pb.RestartPolicy{Attempts: 0, IntervalMs: 1000, Mode: pb.RestartMode_RESTART_MODE_FAIL},
		Logger:  testutil.Logger(t),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	return New(cfg)
}

func waitRunDone(t *testing.T, tr *TaskRunner) {
	t.Helper()
	select {
	case <-tr.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("runner not done: %v", tr.State())
	}
}

func waitState(t *testing.T, tr *TaskRunner, s pb.TaskLifecycleState) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := tr.State().GetState(); got != s {
			return fmt.Errorf("state %v, want %v", got, s)
		}
		return nil
	})
}

func types(st *pb.TaskState) []string {
	var out []string
	for _, ev := range st.GetEvents() {
		out = append(out, ev.GetType())
	}
	return out
}

// The driver gets a task config built by the hooks: a fresh valid ID per
// attempt, the env with a hook's additions (a hook may override what an
// earlier hook set), the config interpolated after every hook ran, the
// resources in the driver's units.
func TestTaskConfigReachingTheDriver(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log}}, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	d.exitLast(t, 1)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(d.started()) < 2 {
			return errors.New("not restarted")
		}
		return nil
	})
	d.exitLast(t, 1)
	waitRunDone(t, tr)
	s := d.started()
	if s[0].GetId() == s[1].GetId() || !sdk.ValidTaskID(s[0].GetId()) || !sdk.ValidTaskID(s[1].GetId()) {
		t.Fatalf("task ids %q, %q: want two valid, different ids", s[0].GetId(), s[1].GetId())
	}
	cfg := s[0]
	if cfg.GetEnv()["HOOK"] != "yes" || cfg.GetEnv()["BERTH_TASK_NAME"] != "overridden" || cfg.GetEnv()["BERTH_ALLOC_ID"] != "a1" {
		t.Fatalf("env %v", cfg.GetEnv())
	}
	if got := cfg.GetDriverConfig()["arg"].GetStringValue(); got != "a1-yes" {
		t.Fatalf("interpolated config %q, want a1-yes", got)
	}
	if r := cfg.GetResources(); r.GetCpuShares() != 256 || r.GetMemoryBytes() != 10<<20 {
		t.Fatalf("resources %v, want 256 shares (500 MHz of a 2000 MHz core) and 10 MiB", r)
	}
	if cfg.GetTaskDir() == "" || cfg.GetLogDir() == "" || cfg.GetLogs().GetMaxFiles() == 0 {
		t.Fatalf("dirs and logs: %v", cfg)
	}
	want := []string{"prestart recovered=false attempt=1", "poststart recovered=false", "exited",
		"prestart recovered=false attempt=2", "poststart recovered=false", "exited"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("hooks %v, want %v", got, want)
	}
	d.mu.Lock()
	destroyed := slices.Clone(d.destroys)
	d.mu.Unlock()
	if !slices.Equal(destroyed, []string{s[0].GetId(), s[1].GetId()}) {
		t.Fatalf("destroyed attempts %v", destroyed)
	}
}

// A failed prestart hook: no driver start, no poststart/stop/exited
// hooks; the restart policy decides; the destroy hooks still run.
func TestFailedPrestartHook(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log, prestartErr: errors.New("volume not ready")}}, nil)
	go tr.Run()
	waitRunDone(t, tr)
	st := tr.State()
	if !st.GetFailed() || len(d.started()) != 0 {
		t.Fatalf("state %v, starts %d", st, len(d.started()))
	}
	if got := types(st); !slices.Equal(got, []string{"Task Setup", "Setup Failure", "Not Restarting"}) {
		t.Fatalf("events %v", got)
	}
	tr.Destroy(context.Background())
	if got := log.get(); !slices.Equal(got, []string{"prestart recovered=false attempt=1", "destroy"}) {
		t.Fatalf("hooks %v", got)
	}
}

// A hook's call has a deadline: a hook that blocks fails at its
// Timeout, named in the event.
func TestHookDeadline(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: &hookLog{}, block: true, timeout: 50 * time.Millisecond}}, nil)
	began := time.Now()
	go tr.Run()
	waitRunDone(t, tr)
	if time.Since(began) > 5*time.Second {
		t.Fatal("a blocking hook held the runner past its deadline")
	}
	ev := tr.State().GetEvents()[1]
	if ev.GetType() != "Setup Failure" || !ev.GetFailed() {
		t.Fatalf("event %v", ev)
	}
}

// A recovered task is not started: the driver recovers it, the prestart
// and poststart hooks are told, and it is supervised to its exit.
func TestRecoveredTask(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	h := &driverpb.TaskHandle{Driver: "fake", Config: &driverpb.TaskConfig{Id: "a1.web.old"}}
	var persisted []string
	var mu sync.Mutex
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log}}, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: 5}, Handle: h}
		c.OnState = func(_ *pb.TaskState, id string) error {
			mu.Lock()
			persisted = append(persisted, id)
			mu.Unlock()
			return nil
		}
		c.Ephemeral = true
	})
	go tr.Run()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(log.get()) < 2 {
			return errors.New("hooks not run")
		}
		return nil
	})
	d.ch("a1.web.old") <- &driverpb.ExitResult{ExitCode: 0}
	waitRunDone(t, tr)
	if len(d.started()) != 0 || !slices.Equal(d.recovers, []string{"a1.web.old"}) {
		t.Fatalf("starts %v, recovers %v", d.started(), d.recovers)
	}
	if got := log.get(); !slices.Equal(got, []string{"prestart recovered=true attempt=0", "poststart recovered=true", "exited"}) {
		t.Fatalf("hooks %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(persisted) == 0 || persisted[0] != "a1.web.old" {
		t.Fatalf("the recovered attempt was not persisted first: %v", persisted)
	}
	if st := tr.State(); st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("state %v", st)
	}
}

// A task that cannot be recovered counts as a failed attempt and is
// started again per its policy.
func TestUnrecoverableTaskRestarts(t *testing.T) {
	d := newFakeDriver()
	d.recoverErr = sdk.ErrTaskNotFound
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING},
			Handle: &driverpb.TaskHandle{Driver: "fake", Config: &driverpb.TaskConfig{Id: "gone"}}}
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(d.started()) != 1 || tr.State().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return fmt.Errorf("starts %d, state %v", len(d.started()), tr.State())
		}
		return nil
	})
	if got := types(tr.State()); !slices.Contains(got, "Failed Restoring") {
		t.Fatalf("events %v", got)
	}
	if err := tr.Kill(context.Background(), "test over"); err != nil {
		t.Fatal(err)
	}
}

// Kill runs the stop hooks before the driver's stop; a task killed while
// it waits for a restart is not started again.
func TestKillStopsHooksThenTask(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log}}, nil)
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	if err := tr.Restart("again"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(d.started()) != 2 || tr.State().GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
			return errors.New("not restarted")
		}
		return nil
	})
	if err := tr.Kill(context.Background(), "bye"); err != nil {
		t.Fatal(err)
	}
	st := tr.State()
	if st.GetRestarts() != 1 || st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("state %v", st)
	}
	if err := tr.Restart("again"); !errors.Is(err, ErrTaskDead) {
		t.Fatalf("Restart of a dead task: %v", err)
	}
	want := []string{"prestart recovered=false attempt=1", "poststart recovered=false", "stop", "exited",
		"prestart recovered=false attempt=2", "poststart recovered=false", "stop", "exited"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("hooks %v, want %v", got, want)
	}
	if got := types(st); !slices.Contains(got, "Restart Signaled") || got[len(got)-1] != "Killed" {
		t.Fatalf("events %v", got)
	}
}

// Shutdown leaves the task running: no stop, no exit.
func TestShutdownLeavesTheTaskRunning(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log}}, nil)
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	tr.Shutdown()
	if st := tr.State(); st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
		t.Fatalf("state after shutdown %v", st)
	}
	if got := log.get(); slices.Contains(got, "stop") || slices.Contains(got, "exited") {
		t.Fatalf("hooks %v", got)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.destroys) != 0 {
		t.Fatalf("destroyed %v", d.destroys)
	}
}

// Shutdown while a task waits for its restart leaves it not dead, so the
// next client starts it again rather than taking it for finished.
func TestShutdownDuringRestartDelayKeepsTheTaskAlive(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: time.Hour.Milliseconds(), Mode: pb.RestartMode_RESTART_MODE_FAIL}
	})
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	d.exitLast(t, 1)
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING)
	tr.Shutdown()
	if st := tr.State(); st.GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || st.GetFailed() {
		t.Fatalf("state after shutdown %v", st)
	}
}

// A kill ends a prestart hook that waits, well before its deadline.
func TestKillEndsAWaitingPrestartHook(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: &hookLog{}, block: true, timeout: time.Hour}}, nil)
	go tr.Run()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(tr.State().GetEvents()) == 0 {
			return errors.New("not set up yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Kill(ctx, "stop"); err != nil {
		t.Fatalf("Kill: %v (the waiting hook held it)", err)
	}
	if st := tr.State(); st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || len(d.started()) != 0 {
		t.Fatalf("state %v, starts %d", st, len(d.started()))
	}
}

// A task the driver reports OOM killed says so in its Terminated event, in
// words for `alloc status` and in the details for machines.
func TestOOMKillIsReportedInTheTerminatedEvent(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, nil)
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	d.ch(d.started()[0].GetId()) <- &driverpb.ExitResult{ExitCode: 137, Signal: 9, OomKilled: true}
	waitRunDone(t, tr)
	var term *pb.TaskEvent
	for _, ev := range tr.State().GetEvents() {
		if ev.GetType() == "Terminated" {
			term = ev
		}
	}
	if term == nil {
		t.Fatalf("no Terminated event: %v", types(tr.State()))
	}
	if want := "Exit code: 137, signal: 9, OOM killed (memory limit reached)"; term.GetMessage() != want {
		t.Fatalf("Terminated message %q, want %q", term.GetMessage(), want)
	}
	if term.GetDetails()["oom_killed"] != "true" {
		t.Fatalf("Terminated details %v", term.GetDetails())
	}
}

// Kill stops the task with its own kill_signal and kill_timeout.
func TestKillUsesTheTasksSignalAndTimeout(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Info.Task.KillSignal = "SIGINT"
		c.Info.Task.KillTimeoutMs = 2500
	})
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	id := d.started()[0].GetId()
	if err := tr.Kill(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	waitRunDone(t, tr)
	d.mu.Lock()
	stops := slices.Clone(d.stops)
	d.mu.Unlock()
	if want := []string{id + " SIGINT 2.5s"}; !slices.Equal(stops, want) {
		t.Fatalf("StopTask calls %q, want %q", stops, want)
	}
}

// The attempt is recorded (its task ID, the task not running yet) before
// the driver starts it; a record that cannot be written fails the start
// with a Setup Failure naming the error, and no StartTask is made.
func TestAttemptIsRecordedBeforeItStarts(t *testing.T) {
	d := newFakeDriver()
	errFull := errors.New("no space left on device")
	var mu sync.Mutex
	failed := false
	var recorded []string // "state taskID" of each write naming an attempt
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 1, IntervalMs: time.Hour.Milliseconds(), DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_FAIL}
		c.OnState = func(st *pb.TaskState, id string) error {
			mu.Lock()
			defer mu.Unlock()
			if id == "" {
				return nil
			}
			if !failed {
				// The disk is full for the first attempt's record only.
				failed = true
				return errFull
			}
			recorded = append(recorded, fmt.Sprintf("%s %s", st.GetState(), id))
			return nil
		}
	})
	go tr.Run()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if len(eventsOf(tr.State(), "Setup Failure")) == 0 {
			return fmt.Errorf("no Setup Failure yet: %v", tr.State())
		}
		return nil
	})
	ev := eventsOf(tr.State(), "Setup Failure")[0]
	if !ev.GetFailed() || ev.GetDetails()["reason"] != "state-not-persisted" || !strings.Contains(ev.GetMessage(), errFull.Error()) ||
		!strings.Contains(ev.GetMessage(), ev.GetDetails()["task_id"]) {
		t.Fatalf("Setup Failure %v, want failed, reason state-not-persisted, naming the attempt and the error", ev)
	}
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	starts := d.started()
	if len(starts) != 1 {
		t.Fatalf("%d starts, want 1 (the attempt recorded after the disk had room)", len(starts))
	}
	id := starts[0].GetId()
	mu.Lock()
	got := slices.Clone(recorded)
	mu.Unlock()
	want := []string{"TASK_LIFECYCLE_STATE_PENDING " + id, "TASK_LIFECYCLE_STATE_RUNNING " + id}
	if len(got) < 2 || !slices.Equal(got[:2], want) {
		t.Fatalf("records naming an attempt: %q, want %q first", got, want)
	}
	if id == ev.GetDetails()["task_id"] {
		t.Fatalf("the attempt that could not be recorded (%s) was started", id)
	}
}

// A task recorded running whose handle the state DB does not hold (its
// end, or its record, was not written: a full disk) is not started again
// silently: it is a failed attempt, a Failed Restoring event names it,
// and the restart policy decides.
func TestRecordedRunningWithoutAHandleIsAFailedAttempt(t *testing.T) {
	d := newFakeDriver()
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: 5}, TaskID: "a1.web.old"}
	})
	go tr.Run()
	waitRunDone(t, tr)
	st := tr.State()
	evs := eventsOf(st, "Failed Restoring")
	if st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || !st.GetFailed() || len(evs) != 1 ||
		!strings.Contains(evs[0].GetMessage(), "a1.web.old") || len(eventsOf(st, "Not Restarting")) != 1 {
		t.Fatalf("task state %v, want dead and failed (no restarts allowed), a Failed Restoring naming a1.web.old", st)
	}
	if n := len(d.started()); n != 0 {
		t.Fatalf("%d starts, want 0", n)
	}
}

// A start the plugin cannot take at all (ErrRequestTooLarge: over the
// message limit of a plugin built with an older sdk) fails the task for
// good with a final event naming why, whatever the restart policy: the
// same request would be refused on every restart.
func TestStartOverThePluginsMessageLimitIsFinal(t *testing.T) {
	d := newFakeDriver()
	d.startErr = &sdk.RPCError{Plugin: "old", Method: "StartTask", Code: codes.ResourceExhausted, Err: sdk.ErrRequestTooLarge,
		Message: "task a1.web's start request is 5000000 bytes, over the 4194304 bytes a plugin speaking driver API 2 may take"}
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 1000, IntervalMs: 60_000, DelayMs: 1, Mode: pb.RestartMode_RESTART_MODE_DELAY}
	})
	go tr.Run()
	waitRunDone(t, tr)
	st := tr.State()
	if !st.GetFailed() || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || len(d.started()) != 1 {
		t.Fatalf("state %v after %d starts, want dead and failed after one", st, len(d.started()))
	}
	last := st.GetEvents()[len(st.GetEvents())-1]
	if last.GetType() != "Not Restarting" || !last.GetFailed() || last.GetDetails()["reason"] != "request-too-large" ||
		!strings.Contains(last.GetMessage(), "4194304 bytes") {
		t.Fatalf("last event %v, want a final Not Restarting naming the limit", last)
	}
}

// A record naming attempt X with no handle for it, pending: the client
// stopped after the write-ahead record and before the driver's handle was
// written, and the driver plugin (which outlives the client) may have
// started X. The driver is told to destroy X before any new attempt
// starts, and the records written until then still name X.
func TestPendingAttemptWithoutAHandleIsDestroyedBeforeANewStart(t *testing.T) {
	d := newFakeDriver()
	var mu sync.Mutex
	var ids []string
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING}, TaskID: "a1.web.old"}
		c.OnState = func(_ *pb.TaskState, id string) error {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, id)
			return nil
		}
	})
	go tr.Run()
	waitState(t, tr, pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING)
	d.mu.Lock()
	calls := slices.Clone(d.calls)
	d.mu.Unlock()
	if len(calls) != 2 || calls[0] != "destroy a1.web.old" || !strings.HasPrefix(calls[1], "start ") {
		t.Fatalf("driver calls %q, want the recorded attempt a1.web.old destroyed, then one new start", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(ids, ""); i < 0 || slices.ContainsFunc(ids[:i], func(id string) bool { return id != "a1.web.old" }) {
		t.Fatalf("records named %q: until a1.web.old is destroyed every record names it", ids)
	}
}

// A record naming attempt X running with no handle for it is a failed
// attempt, as one whose RecoverTask fails: its exited hooks run (a
// csi_plugin task's restored registry entry is torn down there) and the
// driver is told to destroy it.
func TestRecordedRunningWithoutAHandleRunsExitedHooksAndIsDestroyed(t *testing.T) {
	d := newFakeDriver()
	log := &hookLog{}
	tr := newRunner(t, d, []runhooks.Hook{&allHooks{log: log}}, func(c *Config) {
		c.Restore = &Restore{State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: 5}, TaskID: "a1.web.old"}
	})
	go tr.Run()
	waitRunDone(t, tr) // restart attempts 0: dead
	if got := log.get(); !slices.Contains(got, "exited") {
		t.Fatalf("hooks %v: the exited hooks of attempt a1.web.old never ran", got)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !slices.Equal(d.calls, []string{"destroy a1.web.old"}) {
		t.Fatalf("driver calls %q, want a1.web.old destroyed and nothing started", d.calls)
	}
}

// The write-ahead record's failure reaches start() even when a concurrent
// event took its state after start() named the attempt and was told to
// OnState first (that newer write, failing, is the record's failure too):
// no attempt starts whose record was never written. OnState fails every
// write naming an attempt (a full disk) while two goroutines emit events
// in a loop; the race is hit within a few hundred attempts.
func TestWriteAheadFailureIsNotSwallowedByAConcurrentEvent(t *testing.T) {
	d := newFakeDriver()
	var stop atomic.Bool
	var wg sync.WaitGroup
	tr := newRunner(t, d, nil, func(c *Config) {
		c.Restart = &pb.RestartPolicy{Attempts: 2000, IntervalMs: time.Hour.Milliseconds(), Mode: pb.RestartMode_RESTART_MODE_FAIL}
		c.OnState = func(_ *pb.TaskState, id string) error {
			if id != "" {
				return errors.New("no space left on device")
			}
			return nil
		}
	})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				tr.EmitEvent(&pb.TaskEvent{Type: "Noise", Message: "x"})
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	go tr.Run()
	// Done after 2001 refused attempts, or an attempt started.
	testutil.WaitFor(t, 2*time.Minute, func() error {
		select {
		case <-tr.Done():
			return nil
		default:
		}
		if len(d.started()) > 0 {
			return nil
		}
		return fmt.Errorf("runner not done, nothing started: %v", tr.State())
	})
	if s := d.started(); len(s) > 0 {
		t.Fatalf("attempt %s started although every record naming an attempt failed to write (%d starts)", s[0].GetId(), len(s))
	}
	if st := tr.State(); !st.GetFailed() || st.GetRestarts() != 2000 {
		t.Fatalf("state %v, want failed after 2000 restarts", st)
	}
}
