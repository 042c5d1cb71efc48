package fsm_test

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// fullNode is testutil.HeavyNode, the synthetic heavy node.
func fullNode(id string) *pb.Node { return testutil.HeavyNode(id) }

// BenchmarkApplyNodeRegister applies full-fingerprint registrations, the
// heaviest command today, cycling through 1000 nodes so most are
// re-registrations into a populated table (lookup, keep create index,
// replace, bump the table index).
func BenchmarkApplyNodeRegister(b *testing.B) {
	const nodes = 1000
	entries := make([][]byte, nodes)
	for i := range entries {
		entries[i] = mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode(fmt.Sprintf("node-%04d", i))})
	}
	b.SetBytes(int64(len(entries[0])))
	f := fsm.New(nil)
	index := uint64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		index++
		if res := applyAt(f, index, entries[i%nodes]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

// BenchmarkApplyNodeStatusUpdate alternates a node between ready and down:
// the heartbeat-loss path, a clone of a full node each time.
func BenchmarkApplyNodeStatusUpdate(b *testing.B) {
	f := fsm.New(nil)
	applyAt(f, 1, mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode("n1")}))
	var entries [2][]byte
	for i, s := range []pb.NodeStatus{pb.NodeStatus_NODE_STATUS_DOWN, pb.NodeStatus_NODE_STATUS_READY} {
		entries[i] = mustEncode(b, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: s, UpdatedAt: 1})
	}
	index := uint64(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		index++
		if res := applyAt(f, index, entries[i%2]); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
}

// BenchmarkSnapshotRestore persists and restores 10,000 full nodes.
func BenchmarkSnapshotRestore(b *testing.B) {
	f := fsm.New(nil)
	for i := range 10_000 {
		cmd := &pb.NodeRegisterCommand{Node: fullNode(fmt.Sprintf("node-%05d", i))}
		if res := applyAt(f, uint64(i+1), mustEncode(b, fsm.NodeRegister, cmd)); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	b.Run("persist", func(b *testing.B) {
		var size int
		for range b.N {
			size = len(snapshotBytes(b, f))
		}
		b.SetBytes(int64(size))
	})
	b.Run("restore", func(b *testing.B) {
		snap := snapshotBytes(b, f)
		b.SetBytes(int64(len(snap)))
		target := fsm.New(nil)
		b.ResetTimer()
		for range b.N {
			if err := restoreBytes(target, snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// devNode is shaped like the node a dev agent registers today (the raft
// bench's captured internal/bench/testdata/dev-node.json): one fingerprint
// attribute and the two built-in drivers, about 400 bytes encoded.
func devNode(id string) *pb.Node {
	driver := func(name string) *pb.DriverInfo {
		return &pb.DriverInfo{
			Name: name, Detected: true, Healthy: true, HealthDescription: "healthy",
			Version: "0.1.0-dev", Builtin: true, UpdatedAt: 1_795_283_669_933_240_309,
			Attributes: map[string]string{"driver." + name: "true", "driver." + name + ".version": "0.1.0-dev"},
		}
	}
	return &pb.Node{
		Id: id, Name: "vm", Status: pb.NodeStatus_NODE_STATUS_READY, StatusDescription: "registered",
		StatusUpdatedAt: 1_795_283_670_641_798_826, HttpAddr: "127.0.0.1:7646", RegisteredAt: 1_795_283_670_639_851_407,
		Fingerprint: &pb.NodeFingerprint{
			Hostname: "vm", Os: "linux", Arch: "amd64", CpuCores: 2, MemoryBytes: 25_276_510_208,
			BerthVersion: "0.1.0-dev", Attributes: map[string]string{"kernel.version": "6.18.44-fc-v657"},
		},
		Drivers: map[string]*pb.DriverInfo{"mock": driver("mock"), "raw_exec": driver("raw_exec")},
	}
}

// BenchmarkApplyNodeRegisterDev applies registrations of the node a dev
// agent really sends. "new" registers a node never seen before each time,
// as the raft bench does, so the table grows with b.N; "new-batch64" does
// the same in batches of 64 handed over the way raft hands committed entries
// to its FSM (MaxAppendEntries); "reregister" cycles through 1000 nodes
// already in the table.
func BenchmarkApplyNodeRegisterDev(b *testing.B) {
	id := func(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", i) }
	b.Run("new-batch64", func(b *testing.B) {
		const batch = 64
		logs := make([]*raft.Log, b.N)
		for i := range logs {
			data := mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: devNode(id(i))})
			logs[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}
		}
		b.SetBytes(int64(len(logs[0].Data)))
		f := fsm.New(nil)
		b.ReportAllocs()
		b.ResetTimer()
		for start := 0; start < b.N; start += batch {
			for _, r := range applyLogs(f, logs[start:min(start+batch, b.N)]) {
				if res, ok := r.(*fsm.ApplyResult); !ok || res.Err != nil {
					b.Fatalf("result %#v", r)
				}
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		entries := make([][]byte, b.N)
		for i := range entries {
			entries[i] = mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: devNode(id(i))})
		}
		b.SetBytes(int64(len(entries[0])))
		f := fsm.New(nil)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if res := applyAt(f, uint64(i+1), entries[i]); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
	b.Run("reregister", func(b *testing.B) {
		const nodes = 1000
		entries := make([][]byte, nodes)
		f := fsm.New(nil)
		for i := range entries {
			entries[i] = mustEncode(b, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: devNode(id(i))})
			if res := applyAt(f, uint64(i+1), entries[i]); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
		b.SetBytes(int64(len(entries[0])))
		index := uint64(nodes)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			index++
			if res := applyAt(f, index, entries[i%nodes]); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
}

// applyLogs applies logs as raft would: in one ApplyBatch call when the FSM
// batches, else one Apply per entry.
func applyLogs(f raft.FSM, logs []*raft.Log) []any {
	if bf, ok := f.(raft.BatchingFSM); ok {
		return bf.ApplyBatch(logs)
	}
	out := make([]any, len(logs))
	for i, l := range logs {
		out[i] = f.Apply(l)
	}
	return out
}

// BenchmarkApplyPlan applies PlanApply commands, the command the state
// machine is judged on, to a state of 1,000 ready nodes and 5,000 running
// allocs of 50 jobs: one alloc, and 100 allocs on 100 nodes, each plan
// with its eval's completion as the worker sends it. Every placement goes
// through the whole re-check (node, version, fit over the node's allocs)
// and the job's status. Plans place new allocs, so the state grows; it is
// restored to the 5,000 allocs, outside the timer, before it has grown by
// 1,000.
func BenchmarkApplyPlan(b *testing.B) {
	const nodes, jobs, allocsPerJob = 1000, 50, 100
	src := fsm.New(nil)
	index := uint64(0)
	next := func() uint64 { index++; return index }
	for i := range nodes {
		n := devNode(fmt.Sprintf("node-%04d", i))
		n.Resources = &pb.NodeResources{CpuMhz: 1 << 40, MemoryMb: 1 << 40}
		applyOK(b, src, next(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
	}
	for j := range jobs {
		job := benchJob(fmt.Sprintf("job-%02d", j))
		applyOK(b, src, next(), fsm.JobRegister, &pb.JobRegisterCommand{Job: job})
		plan := &pb.Plan{EvalId: "eval-setup", JobId: job.GetId()}
		for k := range allocsPerJob {
			node := (j*allocsPerJob + k) % nodes
			plan.Allocs = append(plan.Allocs, benchAlloc(fmt.Sprintf("%s-%03d", job.GetId(), k), job.GetId(), node))
		}
		applyOK(b, src, next(), fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: 1})
	}
	base := snapshotBytes(b, src)
	baseIndex := index

	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("allocs=%d", size), func(b *testing.B) {
			entries := make([][]byte, b.N)
			for i := range entries {
				eval := fmt.Sprintf("eval-%08d", i)
				plan := &pb.Plan{EvalId: eval, JobId: "job-07"}
				for k := range size {
					plan.Allocs = append(plan.Allocs, benchAlloc(fmt.Sprintf("new-%08d-%03d", i, k), "job-07", (i*size+k)%nodes))
				}
				entries[i] = mustEncode(b, fsm.PlanApply, &pb.PlanApplyCommand{
					Plan: plan, AppliedAt: int64(i),
					Evals: []*pb.Evaluation{{Id: eval, JobId: "job-07", Status: pb.EvalStatus_EVAL_STATUS_COMPLETE, Priority: 50}},
				})
			}
			f := fsm.New(nil)
			resetEvery := max(1, 1000/size)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%resetEvery == 0 {
					b.StopTimer()
					if err := restoreBytes(f, base); err != nil {
						b.Fatal(err)
					}
					index = baseIndex
					b.StartTimer()
				}
				res := applyAt(f, next(), entries[i])
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				if pr := res.Response.(*pb.PlanResult); pr.GetAppliedAllocs() != int32(size) {
					b.Fatalf("plan %d applied %d allocs of %d: %v", i, pr.GetAppliedAllocs(), size, pr.GetRefusals())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/alloc")
		})
	}
}

// benchJob is a service job of one group of two tasks.
func benchJob(id string) *pb.Job {
	task := func(name string) *pb.Task {
		return &pb.Task{Name: name, Driver: "raw_exec", Env: map[string]string{"PORT": "8080", "MODE": "prod"},
			Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64}}
	}
	return &pb.Job{Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "web", Count: 100, Tasks: []*pb.Task{task("server"), task("sidecar")}}}}
}

// benchAlloc is a placement as the scheduler makes one: resources per
// task, its metric's shape left out (the plan does not carry it).
func benchAlloc(id, job string, node int) *pb.Allocation {
	return &pb.Allocation{
		Id: id, Name: job + ".web[0]", EvalId: "eval-" + id, NodeId: fmt.Sprintf("node-%04d", node), NodeName: "vm",
		JobId: job, JobVersion: 0, TaskGroup: "web",
		Resources: &pb.AllocResources{CpuMhz: 200, MemoryMb: 128, Tasks: map[string]*pb.TaskResources{
			"server": {CpuMhz: 100, MemoryMb: 64}, "sidecar": {CpuMhz: 100, MemoryMb: 64},
		}},
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
	}
}

// BenchmarkApplyPlanClaim is the plan that places one alloc with one volume
// claim, against the same plan without a claim, in a state of 1,000 nodes,
// 5,000 allocs and 1,000 volumes of each of two plugins: nfs (no
// controller: the claim is ready at once) and ebs (controller required:
// the claim creates an attachment).
func BenchmarkApplyPlanClaim(b *testing.B) {
	const nodes, volumes = 1000, 1000
	src := fsm.New(nil)
	index := uint64(0)
	next := func() uint64 { index++; return index }
	for i := range nodes {
		n := devNode(fmt.Sprintf("node-%04d", i))
		n.Resources = &pb.NodeResources{CpuMhz: 1 << 40, MemoryMb: 1 << 40}
		applyOK(b, src, next(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
	}
	applyOK(b, src, next(), fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "node-0000",
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true, ControllerRequired: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true}}})
	job := benchJob("job-00")
	applyOK(b, src, next(), fsm.JobRegister, &pb.JobRegisterCommand{Job: job})
	plan := &pb.Plan{EvalId: "eval-setup", JobId: job.GetId()}
	for k := range 5000 {
		plan.Allocs = append(plan.Allocs, benchAlloc(fmt.Sprintf("setup-%04d", k), job.GetId(), k%nodes))
	}
	applyOK(b, src, next(), fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: 1})
	mnmw := []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER,
		AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}
	for _, plugin := range []string{"nfs", "ebs"} {
		for i := range volumes {
			applyOK(b, src, next(), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{
				Id: fmt.Sprintf("%s-%04d", plugin, i), PluginId: plugin, Capabilities: mnmw}})
		}
	}
	base := snapshotBytes(b, src)
	baseIndex := index

	for _, plugin := range []string{"none", "nfs", "ebs"} {
		b.Run("claim="+plugin, func(b *testing.B) {
			entries := make([][]byte, b.N)
			for i := range entries {
				alloc := fmt.Sprintf("new-%08d", i)
				plan := &pb.Plan{EvalId: "eval", JobId: "job-00", Allocs: []*pb.Allocation{benchAlloc(alloc, "job-00", i%nodes)}}
				if plugin != "none" {
					plan.Claims = []*pb.Claim{{Id: "claim-" + alloc, AllocId: alloc, VolumeId: fmt.Sprintf("%s-%04d", plugin, i%volumes),
						Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: mnmw[0].GetAccessMode(), AttachmentMode: mnmw[0].GetAttachmentMode()}}
				}
				entries[i] = mustEncode(b, fsm.PlanApply, &pb.PlanApplyCommand{Plan: plan, AppliedAt: int64(i)})
			}
			f := fsm.New(nil)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%volumes == 0 {
					b.StopTimer()
					if err := restoreBytes(f, base); err != nil {
						b.Fatal(err)
					}
					index = baseIndex
					b.StartTimer()
				}
				res := applyAt(f, next(), entries[i])
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				want := int32(1)
				if plugin == "none" {
					want = 0
				}
				if pr := res.Response.(*pb.PlanResult); pr.GetAppliedAllocs() != 1 || pr.GetAppliedClaims() != want {
					b.Fatalf("plan %d: %v", i, pr)
				}
			}
		})
	}
}
