package allocrunner

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

func mockTask(name string, cfg map[string]*driverpb.ConfigValue) *pb.Task {
	return &pb.Task{Name: name, Driver: "mock", Config: cfg, KillTimeoutMs: 2000,
		Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64}}
}

// A task that keeps failing is restarted per policy (attempts, delay),
// then, mode fail, not restarted: the task and the alloc fail.
func TestFailingTaskRestartsPerPolicyThenFailsTheAlloc(t *testing.T) {
	e := newEnv(t)
	policy := &pb.RestartPolicy{Attempts: 2, IntervalMs: time.Hour.Milliseconds(), DelayMs: 20, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, policy, mockTask("web", sdk.ConfigMap{
		"run_for": sdk.DurationValue(10 * time.Millisecond), "exit_code": sdk.IntValue(3)}))
	ar, u := e.runner(a, j, nil)
	waitDone(t, ar)

	st := ar.TaskStates()["web"]
	if st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD || !st.GetFailed() || st.GetRestarts() != 2 {
		t.Fatalf("task state %v, want dead, failed, 2 restarts", st)
	}
	want := []string{"Received", "Task Setup", "Started", "Terminated", "Restarting", "Started", "Terminated",
		"Restarting", "Started", "Terminated", "Not Restarting"}
	if got := eventTypes(st); !slices.Equal(got, want[len(want)-10:]) {
		t.Fatalf("events %v, want the last 10 of %v", got, want)
	}
	if ev := event(st, "Restarting"); ev.GetDetails()["restart_in_ms"] != "20" {
		t.Fatalf("Restarting event %v, want restart_in_ms 20", ev)
	}
	if ev := event(st, "Terminated"); ev.GetDetails()["exit_code"] != "3" {
		t.Fatalf("Terminated event %v, want exit_code 3", ev)
	}
	if ev := event(st, "Not Restarting"); !ev.GetFailed() {
		t.Fatalf("Not Restarting event %v is not failed", ev)
	}
	if s, _ := ar.ClientStatus(); s != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED {
		t.Fatalf("alloc status %v, want failed", s)
	}
	if got := u.statuses(); got[len(got)-1] != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED {
		t.Fatalf("reported statuses %v, want failed last", got)
	}
	// Each restart waited its delay.
	var started []int64
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Started" {
			started = append(started, ev.GetOccurredAt())
		}
	}
	for i := 1; i < len(started); i++ {
		if gap := time.Duration(started[i] - started[i-1]); gap < 20*time.Millisecond {
			t.Fatalf("restart %d came %s after the previous start, under the 20ms delay", i, gap)
		}
	}
}

// Mode delay: past its attempts, a task waits for the interval to end and
// starts again, rather than failing.
func TestRestartModeDelayWaitsForTheInterval(t *testing.T) {
	e := newEnv(t)
	policy := &pb.RestartPolicy{Attempts: 1, IntervalMs: 300, DelayMs: 10, Mode: pb.RestartMode_RESTART_MODE_DELAY}
	a, j := job(pb.JobType_JOB_TYPE_SERVICE, policy, mockTask("web", sdk.ConfigMap{
		"run_for": sdk.DurationValue(5 * time.Millisecond), "exit_code": sdk.IntValue(1)}))
	ar, _ := e.runner(a, j, nil)
	st := waitTask(t, ar, "web", func(st *pb.TaskState) bool { return st.GetRestarts() >= 3 })
	if st.GetFailed() {
		t.Fatalf("task failed in mode delay: %v", st)
	}
	var delays []string
	for _, ev := range st.GetEvents() {
		if ev.GetType() == "Restarting" {
			delays = append(delays, ev.GetDetails()["restart_in_ms"])
		}
	}
	// One of the restarts waited for (most of) the interval, not the delay.
	long := false
	for _, d := range delays {
		if d != "10" && d != "0" {
			long = true
		}
	}
	if !long {
		t.Fatalf("restart delays %v: none waited for the interval", delays)
	}
}

// A batch task that exits 0 completes; it is not restarted.
func TestBatchTaskCompletes(t *testing.T) {
	e := newEnv(t)
	a, j := job(pb.JobType_JOB_TYPE_BATCH, nil, mockTask("once", sdk.ConfigMap{"run_for": sdk.DurationValue(10 * time.Millisecond)}))
	ar, u := e.runner(a, j, nil)
	waitDone(t, ar)
	st := ar.TaskStates()["once"]
	if st.GetFailed() || st.GetRestarts() != 0 || st.GetState() != pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD {
		t.Fatalf("task %v, want dead, not failed, no restart", st)
	}
	// The state DB holds the final state with every event: events ride
	// along with the writes of state changes.
	recs, err := e.db.TaskStates(a.GetId())
	if err != nil || len(recs) != 1 || !proto.Equal(recs[0].GetState(), st) || recs[0].GetTaskId() != "" {
		t.Fatalf("persisted %v (%v), want %v and no running attempt", recs, err, st)
	}
	want := []pb.AllocClientStatus{pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
		pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE}
	if got := u.statuses(); !slices.Equal(got, want) {
		t.Fatalf("reported statuses %v, want %v", got, want)
	}
}
