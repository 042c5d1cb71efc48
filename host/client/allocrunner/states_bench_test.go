package allocrunner

import (
	"fmt"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// taskStatesWithEvents is an alloc's states as a start leaves them: a few
// tasks, each with the events of its way to running.
func taskStatesWithEvents(tasks, events int) map[string]*pb.TaskState {
	out := map[string]*pb.TaskState{}
	for i := range tasks {
		st := &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING}
		for j := range events {
			st.Events = append(st.Events, &pb.TaskEvent{Type: fmt.Sprintf("event %d", j), Message: "a message as long as most", OccurredAt: int64(j)})
		}
		out[fmt.Sprintf("task%d", i)] = st
	}
	return out
}

// The states the alloc's waits read on every task change: a deep copy
// (TaskStates, for callers outside the runner) against the shared values
// (sharedTaskStates). `go test ./host/client/allocrunner -run X -bench
// TaskStatesForWaits -benchmem`.
func BenchmarkTaskStatesForWaits(b *testing.B) {
	ar := &AllocRunner{states: taskStatesWithEvents(2, 4)}
	b.Run("copied", func(b *testing.B) {
		for b.Loop() {
			if anyFailed(ar.TaskStates(), []string{"task0", "task1"}) {
				b.Fatal("failed")
			}
		}
	})
	b.Run("shared", func(b *testing.B) {
		for b.Loop() {
			if anyFailed(ar.sharedTaskStates(), []string{"task0", "task1"}) {
				b.Fatal("failed")
			}
		}
	})
}

// The shared states are the stored ones, not copies, and a change stores
// a new value instead of changing the one a wait may be reading.
func TestSharedTaskStatesAreTheStoredOnes(t *testing.T) {
	ar := &AllocRunner{states: taskStatesWithEvents(1, 1)}
	shared := ar.sharedTaskStates()
	if shared["task0"] != ar.states["task0"] {
		t.Fatal("sharedTaskStates copied the state")
	}
	if copied := ar.TaskStates(); copied["task0"] == ar.states["task0"] {
		t.Fatal("TaskStates shares the state it must copy")
	}
	shared["task1"] = &pb.TaskState{}
	if len(ar.states) != 1 {
		t.Fatal("a change to the returned map reached the runner's")
	}
}
