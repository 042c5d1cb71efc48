package state

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

func taskState(alloc, task, taskID string) *pb.TaskStateRecord {
	return &pb.TaskStateRecord{AllocId: alloc, Task: task, TaskId: taskID, Driver: "mock",
		State: &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, Restarts: 2}}
}

func TestAllocRecordsAndTaskStates(t *testing.T) {
	path := Path(t.TempDir())
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a1 := &pb.AllocRecord{Alloc: &pb.Allocation{Id: "a1", AllocModifyIndex: 4}, Job: &pb.Job{Id: "j", Version: 2}, UpdatedAt: 1}
	for _, err := range []error{
		db.PutAlloc(a1),
		db.PutAlloc(&pb.AllocRecord{Alloc: &pb.Allocation{Id: "a2"}}),
		db.PutTaskState(taskState("a1", "web", "a1.web.1")),
		db.PutTaskState(taskState("a1", "log", "")),
		db.PutTaskState(taskState("a10", "web", "x")), // a prefix of another alloc's key
		db.PutTaskState(taskState("a2", "web", "y")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	db = open(t, path)

	allocs, err := db.Allocs()
	if err != nil || len(allocs) != 2 || !proto.Equal(allocs[0], a1) {
		t.Fatalf("Allocs = %v, %v", allocs, err)
	}
	ts, err := db.TaskStates("a1")
	if err != nil || len(ts) != 2 || ts[0].GetTask() != "log" || !proto.Equal(ts[1], taskState("a1", "web", "a1.web.1")) {
		t.Fatalf("TaskStates(a1) = %v, %v", ts, err)
	}
	if err := db.DeleteAlloc("a1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := db.Alloc("a1"); ok {
		t.Fatal("a1 still there")
	}
	if ts, _ := db.TaskStates("a1"); len(ts) != 0 {
		t.Fatalf("a1's task states after DeleteAlloc: %v", ts)
	}
	if ts, _ := db.TaskStates("a10"); len(ts) != 1 {
		t.Fatalf("DeleteAlloc(a1) touched a10: %v", ts)
	}
	if got, ok, err := db.Alloc("a2"); !ok || err != nil || got.GetAlloc().GetId() != "a2" {
		t.Fatalf("Alloc(a2) = %v, %t, %v", got, ok, err)
	}
}

func TestAllocRecordsNeedKeys(t *testing.T) {
	db := open(t, Path(t.TempDir()))
	for i, err := range []error{
		db.PutAlloc(&pb.AllocRecord{}),
		db.PutAlloc(&pb.AllocRecord{Alloc: &pb.Allocation{Id: "a/b"}}),
		db.PutTaskState(&pb.TaskStateRecord{AllocId: "a1"}),
		db.PutTaskState(&pb.TaskStateRecord{Task: "web"}),
		db.PutTaskState(&pb.TaskStateRecord{AllocId: "a/1", Task: "web"}),
	} {
		if !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("record %d: %v, want ErrInvalidRecord", i, err)
		}
	}
}
