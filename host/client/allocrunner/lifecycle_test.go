package allocrunner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// An alloc the servers stop is killed with each task's kill_timeout: a
// task that ignores SIGTERM (raw_exec, `trap ” TERM`) dies by SIGKILL
// once the timeout has passed, not before.
func TestServerStopKillsWithKillTimeout(t *testing.T) {
	e := newEnv(t)
	task := &pb.Task{Name: "stubborn", Driver: "raw_exec", KillTimeoutMs: 700, Config: sdk.ConfigMap{
		"command": sdk.StringValue("/bin/sh"),
		"args":    sdk.ListValue("-c", `trap '' TERM; touch "$BERTH_TASK_DIR/trapped"; while true; do sleep 0.05; done`)}}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, task)
	ar, u := e.runner(a, j, nil)
	td, _ := ar.Dir().TaskDir("stubborn")
	waitTask(t, ar, "stubborn", isRunning)
	waitFile(t, filepath.Join(td.Local, "trapped"))

	stop := proto_clone(a)
	stop.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	stop.AllocModifyIndex = 11
	began := time.Now()
	ar.Update(stop, j)
	waitDone(t, ar)
	took := time.Since(began)
	if took < 700*time.Millisecond {
		t.Fatalf("a task ignoring SIGTERM was gone after %s, before its kill_timeout of 700ms", took)
	}
	st := ar.TaskStates()["stubborn"]
	if ev := event(st, "Killing"); ev.GetDetails()["kill_timeout_ms"] != "700" {
		t.Fatalf("Killing event %v, want kill_timeout_ms 700", ev)
	}
	if ev := event(st, "Terminated"); ev.GetDetails()["signal"] != "9" {
		t.Fatalf("Terminated event %v, want signal 9 (SIGKILL after the timeout)", ev)
	}
	if event(st, "Killed") == nil || st.GetFailed() {
		t.Fatalf("task state %v, want Killed and not failed", st)
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
		t.Fatalf("alloc status %v, want complete", s)
	}
	_ = u
}

// The mock driver's ignore_stop_signal: same guarantee through another driver.
func TestKillOfMockIgnoringStopWaitsKillTimeout(t *testing.T) {
	e := newEnv(t)
	task := mockTask("deaf", sdk.ConfigMap{"ignore_stop_signal": sdk.BoolValue(true)})
	task.KillTimeoutMs = 400
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, task)
	ar, _ := e.runner(a, j, nil)
	waitTask(t, ar, "deaf", isRunning)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := ar.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 400*time.Millisecond {
		t.Fatalf("killed after %s, before the 400ms kill_timeout", took)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Prestart tasks run to completion before the main task starts, poststart
// tasks start once it runs, poststop tasks run after it is dead.
func TestLifecycleOrder(t *testing.T) {
	e := newEnv(t)
	pre := mockTask("pre", sdk.ConfigMap{"run_for": sdk.DurationValue(30 * time.Millisecond)})
	pre.Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_PRESTART}
	side := mockTask("side", nil)
	side.Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_PRESTART, Sidecar: true}
	post := mockTask("post", sdk.ConfigMap{"run_for": sdk.DurationValue(10 * time.Millisecond)})
	post.Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_POSTSTART}
	stop := mockTask("cleanup", sdk.ConfigMap{"run_for": sdk.DurationValue(10 * time.Millisecond)})
	stop.Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_POSTSTOP}
	main := mockTask("main", sdk.ConfigMap{"run_for": sdk.DurationValue(150 * time.Millisecond)})
	a, j := job(pb.JobType_JOB_TYPE_BATCH, nil, stop, post, main, side, pre)
	ar, _ := e.runner(a, j, nil)
	waitDone(t, ar)
	st := ar.TaskStates()
	started := func(n string) int64 { return event(st[n], "Started").GetOccurredAt() }
	ended := func(n string) int64 { return event(st[n], "Terminated").GetOccurredAt() }
	for _, n := range []string{"pre", "side", "main", "post", "cleanup"} {
		if event(st[n], "Started") == nil || st[n].GetFailed() {
			t.Fatalf("task %s: %v", n, st[n])
		}
	}
	switch {
	case started("main") < ended("pre"):
		t.Error("main started before the prestart task ended")
	case started("post") < started("main"):
		t.Error("poststart task started before main")
	case started("cleanup") < ended("main"):
		t.Error("poststop task started before main ended")
	case started("cleanup") < ended("side"):
		t.Error("poststop task started before the sidecar was stopped")
	}
	if ev := event(st["side"], "Killing"); ev == nil {
		t.Errorf("sidecar was not killed once main was dead: %v", eventTypes(st["side"]))
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
		t.Fatalf("alloc status %v, want complete", s)
	}
}

// A prestart task that fails for good fails the alloc; the main task never starts.
func TestFailedPrestartTaskFailsTheAlloc(t *testing.T) {
	e := newEnv(t)
	pre := mockTask("pre", sdk.ConfigMap{"run_for": sdk.DurationValue(5 * time.Millisecond), "exit_code": sdk.IntValue(2)})
	pre.Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_PRESTART}
	policy := &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 5, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, policy, pre, mockTask("main", nil))
	ar, _ := e.runner(a, j, nil)
	waitDone(t, ar)
	st := ar.TaskStates()
	if st["pre"].GetRestarts() != 1 || !st["pre"].GetFailed() {
		t.Fatalf("prestart task %v, want failed after 1 restart", st["pre"])
	}
	if event(st["main"], "Started") != nil || st["main"].GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("main task %v: it started, or is not dead", st["main"])
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED {
		t.Fatalf("alloc status %v, want failed", s)
	}
}

// When the leader exits, the other tasks are stopped.
func TestLeaderExitStopsTheOthers(t *testing.T) {
	e := newEnv(t)
	leader := mockTask("leader", sdk.ConfigMap{"run_for": sdk.DurationValue(50 * time.Millisecond)})
	leader.Leader = true
	a, j := job(pb.JobType_JOB_TYPE_BATCH, nil, leader, mockTask("follower", nil))
	ar, _ := e.runner(a, j, nil)
	waitDone(t, ar)
	f := ar.TaskStates()["follower"]
	ev := event(f, "Killing")
	if ev == nil || ev.GetDetails()["reason"] != "leader task exited" {
		t.Fatalf("follower events %v: want Killing because the leader exited", f.GetEvents())
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE {
		t.Fatalf("alloc status %v, want complete", s)
	}
}

// A start the driver refuses is a "Driver Failure" event naming the
// reason and the path.
func TestDriverFailureEventNamesReasonAndPath(t *testing.T) {
	e := newEnv(t)
	task := &pb.Task{Name: "missing", Driver: "raw_exec", Config: sdk.ConfigMap{"command": sdk.StringValue("/nonexistent/prog")}}
	a, j := job(pb.JobType_JOB_TYPE_BATCH, &pb.RestartPolicy{Attempts: 0, IntervalMs: 1000, Mode: pb.RestartMode_RESTART_MODE_FAIL}, task)
	ar, _ := e.runner(a, j, nil)
	waitDone(t, ar)
	st := ar.TaskStates()["missing"]
	ev := event(st, "Driver Failure")
	if ev == nil || ev.GetDetails()["reason"] != string(sdk.StartNotFound) || ev.GetDetails()["path"] != "/nonexistent/prog" || !ev.GetFailed() {
		t.Fatalf("events %v: want a failed Driver Failure with reason not-found and the path", st.GetEvents())
	}
	if !st.GetFailed() {
		t.Fatalf("task %v not failed", st)
	}
}

// The task gets its environment and interpolated config, its dirs exist
// (secrets 0700), and Destroy removes the alloc dir and the DB records.
func TestTaskEnvDirsAndDestroy(t *testing.T) {
	e := newEnv(t)
	task := &pb.Task{Name: "env", Driver: "raw_exec", Env: map[string]string{"GREETING": "hi ${node.unique.name}"},
		Resources: &pb.TaskResources{CpuMhz: 200, MemoryMb: 32},
		Config: sdk.ConfigMap{"command": sdk.StringValue("/bin/sh"),
			"args": sdk.ListValue("-c", `env > "$BERTH_TASK_DIR/env"; echo "$1" > "$BERTH_ALLOC_DIR/arg"`, "sh", "${node.unique.id}:${BERTH_TASK_NAME}")}}
	a, j := job(pb.JobType_JOB_TYPE_BATCH, nil, task)
	ar, _ := e.runner(a, j, nil)
	waitDone(t, ar)
	if st := ar.TaskStates()["env"]; st.GetFailed() {
		t.Fatalf("task failed: %v", st)
	}
	td, _ := ar.Dir().TaskDir("env")
	b, err := os.ReadFile(filepath.Join(td.Local, "env"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	for k, v := range map[string]string{"BERTH_ALLOC_ID": a.GetId(), "BERTH_TASK_NAME": "env", "BERTH_GROUP_NAME": "g",
		"BERTH_JOB_ID": "j1", "BERTH_NODE_ID": "n1", "BERTH_NODE_NAME": "node-one", "BERTH_CPU_LIMIT": "200",
		"BERTH_MEMORY_LIMIT": "32", "BERTH_TASK_DIR": td.Local, "BERTH_SECRETS_DIR": td.Secrets,
		"BERTH_ALLOC_DIR": td.Shared, "GREETING": "hi node-one"} {
		if got[k] != v {
			t.Errorf("task env %s = %q, want %q", k, got[k], v)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(td.Shared, "arg")); strings.TrimSpace(string(b)) != "n1:env" {
		t.Errorf("interpolated arg %q, want n1:env", b)
	}
	if fi, err := os.Stat(td.Secrets); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("secrets dir: %v %v", fi, err)
	}
	if _, ok, _ := e.db.Alloc(a.GetId()); !ok {
		t.Fatal("alloc not persisted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := ar.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ar.Dir().Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("alloc dir after Destroy: %v", err)
	}
	if _, ok, _ := e.db.Alloc(a.GetId()); ok {
		t.Fatal("alloc record after Destroy")
	}
	if ts, _ := e.db.TaskStates(a.GetId()); len(ts) != 0 {
		t.Fatalf("task states after Destroy: %v", ts)
	}
}

// recorder is a hook of every kind that records its calls.
type recorder struct {
	name string
	log  *callLog
	// env and mount it adds at prestart.
	env   map[string]string
	mount *driverpb.Mount
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (r *recorder) Name() string { return r.name }
func (r *recorder) Prerun(ctx context.Context, req *runhooks.PrerunRequest) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("no deadline")
	}
	r.log.add(r.name + ".prerun")
	req.Events.EmitEvent(&pb.TaskEvent{Type: "Alloc Hook Said", Message: r.name})
	return nil
}
func (r *recorder) Postrun(context.Context, *runhooks.PostrunRequest) error {
	r.log.add(r.name + ".postrun")
	return nil
}
func (r *recorder) Destroy(context.Context, *runhooks.AllocDestroyRequest) error {
	r.log.add(r.name + ".destroy")
	return nil
}

type taskRecorder struct{ recorder }

func (r *taskRecorder) Prestart(ctx context.Context, req *runhooks.PrestartRequest, resp *runhooks.PrestartResponse) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("no deadline")
	}
	if req.Env["BERTH_TASK_NAME"] == "" {
		return fmt.Errorf("prestart hook ran before the env hook: %v", req.Env)
	}
	r.log.add(r.name + ".prestart")
	resp.Env = r.env
	if r.mount != nil {
		resp.Mounts = []*driverpb.Mount{r.mount}
	}
	req.Events.EmitEvent(&pb.TaskEvent{Type: "Hook Said", Message: r.name})
	return nil
}
func (r *taskRecorder) Poststart(context.Context, *runhooks.PoststartRequest) error {
	r.log.add(r.name + ".poststart")
	return nil
}
func (r *taskRecorder) Stop(context.Context, *runhooks.StopRequest) error {
	r.log.add(r.name + ".stop")
	return nil
}
func (r *taskRecorder) Exited(context.Context, *runhooks.ExitedRequest) error {
	r.log.add(r.name + ".exited")
	return nil
}
func (r *taskRecorder) Destroy(context.Context, *runhooks.TaskDestroyRequest) error {
	r.log.add(r.name + ".tdestroy")
	return nil
}

// Hooks run in registration order for prerun/prestart/poststart and in
// reverse for teardown; a task hook's env and mounts reach the driver.
func TestHooksOrderAndTaskConfigMutation(t *testing.T) {
	e := newEnv(t)
	log := &callLog{}
	hooks := Hooks{
		Alloc: []func(runhooks.AllocInfo) runhooks.Hook{
			func(runhooks.AllocInfo) runhooks.Hook { return &recorder{name: "A1", log: log} },
			func(runhooks.AllocInfo) runhooks.Hook { return nil },
			func(runhooks.AllocInfo) runhooks.Hook { return &recorder{name: "A2", log: log} },
		},
		Task: []func(runhooks.AllocInfo, *pb.Task) runhooks.Hook{
			func(runhooks.AllocInfo, *pb.Task) runhooks.Hook {
				return &taskRecorder{recorder{name: "T1", log: log, env: map[string]string{"FROM_T1": "1", "SHARED": "t1"}}}
			},
			func(runhooks.AllocInfo, *pb.Task) runhooks.Hook {
				return &taskRecorder{recorder{name: "T2", log: log, env: map[string]string{"SHARED": "t2"},
					mount: &driverpb.Mount{HostPath: "/tmp", TaskPath: "/data"}}}
			},
		},
	}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, mockTask("web", nil))
	ar, _ := e.runner(a, j, func(c *Config) { c.Hooks = hooks })
	st := waitTask(t, ar, "web", isRunning)
	id := event(st, "Started").GetDetails()["task_id"]
	drv, _ := e.m.Driver("mock")
	ts, err := drv.InspectTask(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := mockMounts(ts)
	if err != nil || len(mounts) != 1 || mounts[0].GetTaskPath() != "/data" {
		t.Fatalf("mounts reaching the driver: %v, %v", mounts, err)
	}
	if event(st, "Hook Said") == nil || event(st, "Alloc Hook Said") == nil {
		t.Fatalf("a hook's event is missing: %v", eventTypes(st))
	}
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if err := ar.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"A1.prerun", "A2.prerun", "T1.prestart", "T2.prestart", "T1.poststart", "T2.poststart",
		"T2.stop", "T1.stop", "T2.exited", "T1.exited", "A2.postrun", "A1.postrun",
		"T2.tdestroy", "T1.tdestroy", "A2.destroy", "A1.destroy"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("hook calls\n got %v\nwant %v", got, want)
	}
}

func (r *recorder) Update(_ context.Context, req *runhooks.UpdateRequest) error {
	r.log.add(fmt.Sprintf("%s.update v%d", r.name, req.Job.GetVersion()))
	return nil
}

// An in-place update reaches the update hooks and the next start of the
// tasks; the running attempt is left alone.
func TestInPlaceUpdate(t *testing.T) {
	e := newEnv(t)
	log := &callLog{}
	task := &pb.Task{Name: "web", Driver: "raw_exec", Env: map[string]string{"FOO": "1"}, Config: sdk.ConfigMap{
		"command": sdk.StringValue("/bin/sh"),
		"args":    sdk.ListValue("-c", `echo "$FOO" >> "$BERTH_TASK_DIR/foo"; while true; do sleep 0.05; done`)}}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, nil, task)
	ar, _ := e.runner(a, j, func(c *Config) {
		c.Hooks.Alloc = []func(runhooks.AllocInfo) runhooks.Hook{func(runhooks.AllocInfo) runhooks.Hook { return &recorder{name: "A", log: log} }}
	})
	waitTask(t, ar, "web", isRunning)
	j2 := proto.Clone(j).(*pb.Job)
	j2.Version = 4
	j2.Groups[0].Tasks[0].Env["FOO"] = "2"
	a2 := proto_clone(a)
	a2.JobVersion, a2.AllocModifyIndex = 4, 20
	ar.Update(a2, j2)
	waitFor(t, func() error {
		if !slices.Contains(log.get(), "A.update v4") {
			return fmt.Errorf("hook calls %v", log.get())
		}
		return nil
	})
	if st := ar.TaskStates()["web"]; st.GetRestarts() != 0 || startedCount(st) != 1 {
		t.Fatalf("an in-place update restarted the task: %v", st)
	}
	if err := ar.Restart("web"); err != nil {
		t.Fatal(err)
	}
	td, _ := ar.Dir().TaskDir("web")
	waitFor(t, func() error {
		b, _ := os.ReadFile(filepath.Join(td.Local, "foo"))
		if string(b) != "1\n2\n" {
			return fmt.Errorf("starts saw FOO %q", b)
		}
		return nil
	})
	if ar.Alloc().GetAllocModifyIndex() != 20 {
		t.Fatalf("runner holds alloc_modify_index %d", ar.Alloc().GetAllocModifyIndex())
	}
	if rec, _, _ := e.db.Alloc(a.GetId()); rec.GetJob().GetVersion() != 4 {
		t.Fatalf("persisted job version %d", rec.GetJob().GetVersion())
	}
}

func startedCount(st *pb.TaskState) int {
	n := 0
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Started" {
			n++
		}
	}
	return n
}
