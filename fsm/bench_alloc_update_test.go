package fsm_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// BenchmarkApplyAllocClientUpdates applies what the 10,000-alloc job
// sends the servers once placed: batched AllocClientUpdate entries (25
// nodes a part each, as the leader's batcher joins them), each node
// reporting its two allocs running with their task's events, into a
// state of 5,000 nodes and the job's 10,000 allocs. Every follower
// applies each of these; ns/update is the cost of one alloc's row.
func BenchmarkApplyAllocClientUpdates(b *testing.B) {
	const nodes, perNode, partsPerEntry = 5000, 2, 25
	f := fsm.New(nil)
	index := uint64(0)
	next := func() uint64 { index++; return index }
	for i := range nodes {
		n := devNode(fmt.Sprintf("node-%04d", i))
		n.Resources = &pb.NodeResources{CpuMhz: 1 << 40, MemoryMb: 1 << 40}
		applyOK(b, f, next(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
	}
	job := benchJob("big")
	job.Groups[0].Count = nodes * perNode
	applyOK(b, f, next(), fsm.JobRegister, &pb.JobRegisterCommand{Job: job})
	allocID := func(node, k int) string { return fmt.Sprintf("big-%04d-%d", node, k) }
	for start := 0; start < nodes; start += 100 {
		plan := &pb.Plan{EvalId: "eval-setup", JobId: "big"}
		for node := start; node < start+100; node++ {
			for k := range perNode {
				plan.Allocs = append(plan.Allocs, benchAlloc(allocID(node, k), "big", node))
			}
		}
		applyOK(b, f, next(), fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: 1})
	}
	running := func(at int64) map[string]*pb.TaskState {
		events := []*pb.TaskEvent{
			{Type: "Received", OccurredAt: at - 3, Message: "task received by client"},
			{Type: "Task Setup", OccurredAt: at - 2, Message: "building task directory"},
			{Type: "Started", OccurredAt: at - 1, Message: "task started by client"},
		}
		return map[string]*pb.TaskState{
			"server":  {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: at, Events: events},
			"sidecar": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, StartedAt: at, Events: events},
		}
	}
	var entries [][]byte
	for start := 0; start < nodes; start += partsPerEntry {
		cmd := &pb.AllocClientUpdateCommand{}
		for node := start; node < start+partsPerEntry; node++ {
			part := &pb.AllocClientUpdateCommand{NodeId: fmt.Sprintf("node-%04d", node), ReceivedAt: int64(node)}
			for k := range perNode {
				part.Updates = append(part.Updates, &pb.AllocClientUpdate{AllocId: allocID(node, k),
					ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, TaskStates: running(int64(node)), UpdatedAt: int64(node)})
			}
			cmd.Batch = append(cmd.Batch, part)
		}
		entries = append(entries, mustEncode(b, fsm.AllocClientUpdate, cmd))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		res := applyAt(f, next(), entries[i%len(entries)])
		if res.Err != nil {
			b.Fatal(res.Err)
		}
		if r, ok := res.Response.(*pb.AllocClientUpdateBatchResult); !ok || len(r.GetRefusals()) > 0 {
			b.Fatalf("entry %d: %v", i, res.Response)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*partsPerEntry*perNode), "ns/update")
}
