package scheduler_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// TestBinPackPrefersFullestNode: the alloc goes to the node left fullest
// that still has room, not the emptiest, nor one where it does not fit.
func TestBinPackPrefersFullestNode(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "a-empty", "b-half", "c-most", "d-full")
	other := schedtest.Job("other", pb.JobType_JOB_TYPE_SERVICE, 1)
	other.Groups[0].Tasks[0].Resources = &pb.TaskResources{CpuMhz: 2000, MemoryMb: 4096}
	st.AddAlloc(schedtest.Alloc("o1", other, 0, "b-half"))
	big := schedtest.Job("big", pb.JobType_JOB_TYPE_SERVICE, 1)
	big.Groups[0].Tasks[0].Resources = &pb.TaskResources{CpuMhz: 3000, MemoryMb: 6000}
	st.AddAlloc(schedtest.Alloc("o2", big, 0, "c-most"))
	full := schedtest.Job("full", pb.JobType_JOB_TYPE_SERVICE, 1)
	full.Groups[0].Tasks[0].Resources = &pb.TaskResources{CpuMhz: 3800, MemoryMb: 8000}
	st.AddAlloc(schedtest.Alloc("o3", full, 0, "d-full"))

	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@c-most"})
	a := res.Plan.GetAllocs()[0]
	want := &pb.Allocation{
		Id: "e1-1", Name: "j.web[0]", Index: 0, EvalId: "e1", NodeId: "c-most", NodeName: "name-c-most",
		JobId: "j", JobVersion: 0, TaskGroup: "web",
		Resources: &pb.AllocResources{CpuMhz: 500, MemoryMb: 256, Tasks: map[string]*pb.TaskResources{
			"task": {CpuMhz: 500, MemoryMb: 256},
		}},
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
		ClientStatus:  pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
		CreatedAt:     now, ModifiedAt: now,
	}
	if !proto.Equal(a, want) {
		t.Errorf("alloc row:\n got %v\nwant %v", a, want)
	}
	equal(t, "eval status", res.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_COMPLETE)
	equal(t, "snapshot index", res.Plan.GetSnapshotIndex(), uint64(1))
	equal(t, "follow-ups", len(res.FollowUps), 0)
}

// TestGroupSpreadsBeforeItStacks: anti-affinity beats bin packing for
// allocs of one group, so count 3 on 3 nodes puts one on each, and count 6
// two on each.
func TestGroupSpreadsBeforeItStacks(t *testing.T) {
	for _, count := range []int32{3, 6} {
		st := schedtest.NewState()
		nodes(st, "n1", "n2", "n3")
		job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, count)
		st.AddJob(job)
		res := run(t, st, schedtest.Eval("e1", job))
		per := count / 3
		equal(t, "allocs per node", nodesOf(res), map[string]int{"n1": int(per), "n2": int(per), "n3": int(per)})
		equal(t, "annotation", res.Plan.GetAnnotations()["web"].GetPlace(), count)
	}
}

// TestAntiAffinityIsPerGroup: the penalty counts only the group's own
// allocs, so a second group bin-packs onto the node the first one chose.
func TestAntiAffinityIsPerGroup(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2")
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	g2 := proto.Clone(job.Groups[0]).(*pb.TaskGroup)
	g2.Name = "api"
	job.Groups = append(job.Groups, g2)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.api[0]@n1", "j.web[0]@n1"})
}

func constraintNode(id string, mut func(*pb.Node)) *pb.Node {
	n := schedtest.Node(id)
	mut(n)
	return n
}

// TestConstraintOperators: each operator and attribute kind, with the one
// node that satisfies it chosen among nodes that do not, and with only the
// others the reason in failed_tg_allocs.
func TestConstraintOperators(t *testing.T) {
	cases := []struct {
		name string
		c    *pb.Constraint
		good func(*pb.Node)
		bad  func(*pb.Node)
	}{
		{"equal attr", &pb.Constraint{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"},
			func(n *pb.Node) {}, func(n *pb.Node) { n.Fingerprint.Os = "darwin" }},
		{"double equal arch", &pb.Constraint{Attribute: "${attr.cpu.arch}", Operator: "==", Value: "arm64"},
			func(n *pb.Node) { n.Fingerprint.Arch = "arm64" }, func(n *pb.Node) {}},
		{"not equal hostname", &pb.Constraint{Attribute: "${attr.unique.hostname}", Operator: "!=", Value: "host-bad"},
			func(n *pb.Node) {}, func(n *pb.Node) { n.Fingerprint.Hostname = "host-bad" }},
		{"node name", &pb.Constraint{Attribute: "${node.unique.name}", Operator: "=", Value: "name-good"},
			func(n *pb.Node) {}, func(n *pb.Node) {}},
		{"node id", &pb.Constraint{Attribute: "${node.unique.id}", Operator: "=", Value: "good"},
			func(n *pb.Node) {}, func(n *pb.Node) {}},
		{"meta", &pb.Constraint{Attribute: "${meta.rack}", Operator: "=", Value: "r1"},
			func(n *pb.Node) { n.Meta["rack"] = "r1" }, func(n *pb.Node) { n.Meta["rack"] = "r2" }},
		{"regexp", &pb.Constraint{Attribute: "${meta.zone}", Operator: "regexp", Value: "^eu-(west|north)-[0-9]$"},
			func(n *pb.Node) { n.Meta["zone"] = "eu-west-1" }, func(n *pb.Node) { n.Meta["zone"] = "us-east-1" }},
		{"version range", &pb.Constraint{Attribute: "${attr.kernel.version}", Operator: "version", Value: ">= 5.10, < 6"},
			func(n *pb.Node) { n.Fingerprint.Attributes["kernel.version"] = "5.15.0" }, func(n *pb.Node) {}},
		{"version pessimistic", &pb.Constraint{Attribute: "${driver.mock.version}", Operator: "version", Value: "~> 1.2"},
			func(n *pb.Node) { n.Drivers["mock"].Version = "1.4.1" }, func(n *pb.Node) { n.Drivers["mock"].Version = "2.0.0" }},
		{"version prerelease", &pb.Constraint{Attribute: "${attr.berth.version}", Operator: "version", Value: ">= 1.0.0"},
			func(n *pb.Node) { n.Fingerprint.BerthVersion = "v1.0.0" }, func(n *pb.Node) { n.Fingerprint.BerthVersion = "1.0.0-rc.1" }},
		{"is_set", &pb.Constraint{Attribute: "${meta.gpu}", Operator: "is_set"},
			func(n *pb.Node) { n.Meta["gpu"] = "yes" }, func(n *pb.Node) {}},
		{"is_not_set", &pb.Constraint{Attribute: "${meta.spot}", Operator: "is_not_set"},
			func(n *pb.Node) {}, func(n *pb.Node) { n.Meta["spot"] = "1" }},
		{"driver attribute", &pb.Constraint{Attribute: "${driver.mock.flavour}", Operator: "=", Value: "mint"},
			func(n *pb.Node) { n.Drivers["mock"].Attributes = map[string]string{"flavour": "mint"} }, func(n *pb.Node) {}},
		{"driver healthy", &pb.Constraint{Attribute: "${driver.raw_exec}", Operator: "=", Value: "1"},
			func(n *pb.Node) {}, func(n *pb.Node) { n.Drivers["raw_exec"].Healthy = false }},
		{"numeric attr", &pb.Constraint{Attribute: "${attr.cpu.numcores}", Operator: "=", Value: "8"},
			func(n *pb.Node) { n.Fingerprint.CpuCores = 8 }, func(n *pb.Node) {}},
		{"value interpolated", &pb.Constraint{Attribute: "${meta.want}", Operator: "=", Value: "${meta.have}"},
			func(n *pb.Node) { n.Meta["want"], n.Meta["have"] = "x", "x" }, func(n *pb.Node) { n.Meta["want"], n.Meta["have"] = "x", "y" }},
	}
	for _, tc := range cases {
		for _, level := range []string{"job", "group", "task"} {
			t.Run(tc.name+"/"+level, func(t *testing.T) {
				job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
				switch level {
				case "job":
					job.Constraints = []*pb.Constraint{tc.c}
				case "group":
					job.Groups[0].Constraints = []*pb.Constraint{tc.c}
				case "task":
					job.Groups[0].Tasks[0].Constraints = []*pb.Constraint{tc.c}
				}
				st := schedtest.NewState()
				st.AddNode(constraintNode("bad1", tc.bad))
				st.AddNode(constraintNode("good", tc.good))
				st.AddNode(constraintNode("bad2", tc.bad))
				st.AddJob(job)
				res := run(t, st, schedtest.Eval("e1", job))
				equal(t, "placements", placed(res), []string{"j.web[0]@good"})

				st = schedtest.NewState()
				st.AddNode(constraintNode("bad1", tc.bad))
				st.AddNode(constraintNode("bad2", tc.bad))
				st.AddJob(job)
				res = run(t, st, schedtest.Eval("e1", job))
				equal(t, "placements", len(res.Plan.GetAllocs()), 0)
				m := res.Eval.GetFailedTgAllocs()["web"]
				equal(t, "filtered", m.GetConstraintFiltered(), map[string]int32{scheduler.ConstraintString(tc.c): 2})
				equal(t, "evaluated/filtered/available", []int32{m.GetNodesEvaluated(), m.GetNodesFiltered(), m.GetNodesAvailable()}, []int32{2, 2, 2})
			})
		}
	}
}

// TestDistinctHosts: no two allocs of the group on one node, counting the
// allocs already running and those placed earlier in the same plan; the
// job-level form also keeps the job's other groups apart.
func TestDistinctHosts(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2", "n3")
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 3)
	job.Groups[0].Constraints = []*pb.Constraint{{Operator: "distinct_hosts", Value: "true"}}
	st.AddJob(job)
	st.AddAlloc(schedtest.Alloc("old0", job, 0, "n1"))
	// Pack tightly otherwise: make n2 the obvious bin-packing choice.
	other := schedtest.Job("o", pb.JobType_JOB_TYPE_SERVICE, 1)
	other.Groups[0].Tasks[0].Resources = &pb.TaskResources{CpuMhz: 3000, MemoryMb: 6000}
	st.AddAlloc(schedtest.Alloc("o1", other, 0, "n2"))
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[1]@n2", "j.web[2]@n3"})

	job.Groups[0].Count = 4
	res = run(t, st, schedtest.Eval("e2", job))
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(1))
	m := res.Eval.GetFailedTgAllocs()["web"]
	equal(t, "distinct filtered", m.GetConstraintFiltered()["distinct_hosts"], int32(3))

	// Job level: group api may not share a node with web.
	st = schedtest.NewState()
	nodes(st, "n1", "n2")
	job = schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	job.Constraints = []*pb.Constraint{{Operator: "distinct_hosts"}}
	api := proto.Clone(job.Groups[0]).(*pb.TaskGroup)
	api.Name = "api"
	job.Groups = append(job.Groups, api)
	st.AddJob(job)
	res = run(t, st, schedtest.Eval("e1", job))
	got := nodesOf(res)
	equal(t, "one alloc per node", got, map[string]int{"n1": 1, "n2": 1})
}

// TestDriversAndNodeState: a node without the task's driver, with it
// unhealthy, or not schedulable (down, ineligible, draining) gets nothing,
// and the metric names the driver.
func TestDriversAndNodeState(t *testing.T) {
	st := schedtest.NewState()
	st.AddNode(constraintNode("no-driver", func(n *pb.Node) { delete(n.Drivers, "mock") }))
	st.AddNode(constraintNode("undetected", func(n *pb.Node) { n.Drivers["mock"].Detected = false }))
	st.AddNode(constraintNode("unhealthy", func(n *pb.Node) { n.Drivers["mock"].Healthy = false }))
	st.AddNode(constraintNode("down", func(n *pb.Node) { n.Status = pb.NodeStatus_NODE_STATUS_DOWN }))
	st.AddNode(constraintNode("ineligible", func(n *pb.Node) { n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE }))
	st.AddNode(constraintNode("draining", func(n *pb.Node) { n.Drain = &pb.DrainStrategy{} }))
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 2)
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", len(res.Plan.GetAllocs()), 0)
	m := res.Eval.GetFailedTgAllocs()["web"]
	equal(t, "filtered", m.GetConstraintFiltered(), map[string]int32{"missing driver mock": 2, "unhealthy driver mock": 1})
	equal(t, "available", m.GetNodesAvailable(), int32(3))
	equal(t, "coalesced", m.GetCoalescedFailures(), int32(1))
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(2))

	st.AddNode(schedtest.Node("fine"))
	res = run(t, st, schedtest.Eval("e2", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@fine", "j.web[1]@fine"})
}

// TestResourceExhaustion: nodes without room are counted by the dimension
// that ran out; the eval is complete with a blocked follow-up and the
// queued count.
func TestResourceExhaustion(t *testing.T) {
	st := schedtest.NewState()
	st.AddNode(constraintNode("small-cpu", func(n *pb.Node) { n.Resources.CpuMhz = 400 }))
	st.AddNode(constraintNode("small-mem", func(n *pb.Node) { n.Resources.MemoryMb = 200 }))
	st.AddNode(constraintNode("reserved", func(n *pb.Node) { n.Resources.ReservedCpuMhz = 3800 }))
	st.AddNode(schedtest.Node("room-for-one"))
	filler := schedtest.Job("filler", pb.JobType_JOB_TYPE_SERVICE, 1)
	filler.Groups[0].Tasks[0].Resources = &pb.TaskResources{CpuMhz: 3400, MemoryMb: 1000}
	st.AddAlloc(schedtest.Alloc("f1", filler, 0, "room-for-one"))
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 3)
	job.Priority = 70
	job.JobModifyIndex = 42
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@room-for-one"})
	m := res.Eval.GetFailedTgAllocs()["web"]
	equal(t, "exhausted", m.GetDimensionExhausted(), map[string]int32{"cpu": 3, "memory": 1})
	equal(t, "nodes exhausted", m.GetNodesExhausted(), int32(4))
	equal(t, "coalesced", m.GetCoalescedFailures(), int32(1))
	equal(t, "queued", res.Eval.GetQueuedAllocations(), map[string]int32{"web": 2})
	if len(res.FollowUps) != 1 {
		t.Fatalf("follow-ups: %v", res.FollowUps)
	}
	b := res.FollowUps[0]
	want := &pb.Evaluation{
		Id: "e1-2", Priority: 70, Type: pb.JobType_JOB_TYPE_SERVICE, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS,
		JobId: "j", JobModifyIndex: 42, Status: pb.EvalStatus_EVAL_STATUS_BLOCKED, PreviousEval: "e1",
		StatusDescription: "created to place remaining allocations", CreatedAt: now, ModifiedAt: now,
		SnapshotIndex: st.Index(),
	}
	if b.GetSnapshotIndex() == 0 {
		t.Error("the blocked eval has no snapshot index: every change would wake it at once")
	}
	if !proto.Equal(b, want) {
		t.Errorf("blocked eval:\n got %v\nwant %v", b, want)
	}
	equal(t, "blocked_eval", res.Eval.GetBlockedEval(), "e1-2")
	equal(t, "eval status", res.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_COMPLETE)
}

// TestDeterministic: the same input gives the same result, and a large
// cluster (where only a sample of nodes is scored) too.
func TestDeterministic(t *testing.T) {
	for _, size := range []int{5, 200} {
		st, eval := schedtest.Cluster(size, int32(size*2), 4000, 8192)
		a := run(t, st, eval)
		b := run(t, st, eval)
		if !proto.Equal(a.Plan, b.Plan) || !proto.Equal(a.Eval, b.Eval) {
			t.Errorf("%d nodes: two runs differ", size)
		}
		if len(a.Plan.GetAllocs()) != size*2 {
			t.Errorf("%d nodes: placed %d of %d", size, len(a.Plan.GetAllocs()), size*2)
		}
		// Anti-affinity spreads: with twice as many allocs as nodes,
		// no node takes more than 3 even when only a sample is scored.
		for n, c := range nodesOf(a) {
			if c > 3 {
				t.Errorf("%d nodes: node %s got %d allocs", size, n, c)
			}
		}
	}
}
