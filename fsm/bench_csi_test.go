package fsm_test

import (
	"fmt"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// BenchmarkApplyNodeCSIUpdate applies NodeCSIUpdate for nodes of a cluster
// where every node runs an instance of one plugin (3 also a controller),
// each update turning its node's instance's health, so every apply
// changes the plugin: at 100, 1,000 and 5,000 nodes, with the servers
// below pluginInstancesSince (inline: the row holds every instance) and at
// it (split); the plugin a storage adapter (no allocs: "adapter") or a
// node plugin run by a system job ("task": one alloc a node, which the
// instance names). Issue 25: inline, each apply costs O(nodes); split, the
// same at every size (compare B/op and allocs/op: time/op is noisy on a
// shared machine).
func BenchmarkApplyNodeCSIUpdate(b *testing.B) {
	for _, form := range []struct{ name, version string }{{"inline", "0.1.0-dev.3"}, {"split", "0.1.0-dev.4"}} {
		for _, task := range []bool{false, true} {
			kind := "adapter"
			if task {
				kind = "task"
			}
			for _, nodes := range []int{100, 1000, 5000} {
				b.Run(fmt.Sprintf("%s/%s/nodes=%d", form.name, kind, nodes), func(b *testing.B) {
					benchNodeCSIUpdate(b, form.version, task, nodes)
				})
			}
		}
	}
}

func benchNodeCSIUpdate(b *testing.B, version string, task bool, nodes int) {
	f := fsm.New(nil)
	index := uint64(1)
	applyOK(b, f, index, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: version}})
	if task {
		index++
		job := &pb.Job{Id: "plug", Name: "plug", Type: pb.JobType_JOB_TYPE_SYSTEM, Priority: 50, Groups: []*pb.TaskGroup{{Name: "web", Count: 1,
			Tasks: []*pb.Task{{Name: "t", Driver: "exec", CsiPlugin: &pb.CSIPluginConfig{Id: "p", Type: "node"}}}}}}
		applyOK(b, f, index, fsm.JobRegister, &pb.JobRegisterCommand{Job: job, Eval: &pb.Evaluation{Id: "e1", JobId: "plug", Status: pb.EvalStatus_EVAL_STATUS_PENDING}})
	}
	entries := make([][2][]byte, nodes)
	for i := range nodes {
		id := fmt.Sprintf("node-%05d", i)
		index++
		reg := registerCmd(id, id, pb.NodeStatus_NODE_STATUS_READY)
		reg.Node.Resources = &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}
		applyOK(b, f, index, fsm.NodeRegister, reg)
		if task {
			index++
			applyOK(b, f, index, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "plug", Allocs: []*pb.Allocation{{Id: "a-" + id, NodeId: id,
				JobId: "plug", TaskGroup: "web", Name: "plug.web", EvalId: "e1", Resources: &pb.AllocResources{CpuMhz: 1, MemoryMb: 1}}}}})
		}
		for h := range 2 {
			cmd := pluginCmd(id, "p", i < 3, h == 0, int64(h+1))
			if task {
				cmd.Nodes["p"].AllocId = "a-" + id
			}
			entries[i][h] = mustEncode(b, fsm.NodeCSIUpdate, cmd)
		}
		index++
		if res := applyAt(f, index, entries[i][0]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	p, err := f.State().CSIPluginByID(nil, "p")
	if err != nil {
		b.Fatal(err)
	}
	if want := map[bool]int{false: 0, true: nodes}[task]; len(p.GetNodes()) != nodes || len(p.GetAllocations()) != want {
		b.Fatalf("plugin with %d node instances and %d allocations, want %d and %d", len(p.GetNodes()), len(p.GetAllocations()), nodes, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		index++
		if res := applyAt(f, index, entries[i%nodes][(i/nodes+1)%2]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}
