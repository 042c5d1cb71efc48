package fsm_test

import (
	"testing"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestAllocsFreedIndexIgnoresClientWritesOfAStoppedAlloc: once the
// servers stopped an alloc, its client's reports (killing, its volumes
// torn down, complete) neither move the mark nor fire its watch: the
// alloc freed its capacity when it was stopped. Each such report used to
// wake every blocked evaluation, and each woken one ran the scheduler and
// proposed a plan that blocked again (a volume move's stop path made ~6
// of them, in raft beside the move's own writes). A client that fails a
// running alloc still moves it, and so does a change by the servers of
// an alloc terminal already.
func TestAllocsFreedIndexIgnoresClientWritesOfAStoppedAlloc(t *testing.T) {
	f := fsm.New(testLogger(t))
	applyOK(t, f, 1, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY,
		Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	applyOK(t, f, 2, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE}})
	res := &pb.AllocResources{CpuMhz: 100, MemoryMb: 100}
	applyOK(t, f, 3, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Allocs: []*pb.Allocation{
		{Id: "a1", NodeId: "n1", JobId: "web", Resources: res}, {Id: "a2", NodeId: "n1", JobId: "web", Resources: res}}}})
	applyOK(t, f, 4, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING},
		{AllocId: "a2", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING}}})
	st := f.State()
	applyOK(t, f, 5, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e", JobId: "web", Stops: []*pb.AllocStop{{AllocId: "a1"}}}})
	if got := freedIndex(t, st, nil); got != 5 {
		t.Fatalf("after the servers stopped a1 at 5: freed at %d", got)
	}

	ws := memdb.NewWatchSet()
	freedIndex(t, st, ws)
	idx := uint64(5)
	for _, up := range []*pb.AllocClientUpdate{
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
			TaskStates: map[string]*pb.TaskState{"app": {Events: []*pb.TaskEvent{{Type: "Killing"}}}}},
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING,
			TaskStates: map[string]*pb.TaskState{"app": {Events: []*pb.TaskEvent{{Type: "Killing"}, {Type: "Terminated"}}}}},
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE},
	} {
		idx++
		applyOK(t, f, idx, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{up}})
		if got := freedIndex(t, st, nil); got != 5 || fired(ws) {
			t.Fatalf("after the client's write of the stopped a1 at %d (%s): freed at %d (want 5), watch fired %v (want false)",
				idx, pb.EnumWord(up.GetClientStatus()), got, fired(ws))
		}
	}

	idx++
	applyOK(t, f, idx, fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a2", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED}}})
	if got := freedIndex(t, st, nil); got != idx || !fired(ws) {
		t.Fatalf("after the client failed the running a2 at %d: freed at %d, watch fired %v", idx, got, fired(ws))
	}

	idx++
	applyOK(t, f, idx, fsm.AllocDesiredTransition, &pb.AllocDesiredTransitionCommand{Allocs: map[string]*pb.DesiredTransition{"a1": {Migrate: true}}})
	if got := freedIndex(t, st, nil); got != idx {
		t.Fatalf("after the servers changed the stopped a1 at %d: freed at %d", idx, got)
	}
}
