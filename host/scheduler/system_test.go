package scheduler_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

func systemJob() *pb.Job {
	job := schedtest.Job("sys", pb.JobType_JOB_TYPE_SYSTEM, 0)
	job.Groups[0].Name = "web"
	return job
}

func sysAlloc(id string, job *pb.Job, node string) *pb.Allocation {
	a := schedtest.Alloc(id, job, 0, node)
	return a
}

// TestSystemPlacesOnEveryFeasibleNode: one alloc per node that is
// schedulable, has the driver, passes the constraints and has room; the
// node without room is a failed placement with its dimension.
func TestSystemPlacesOnEveryFeasibleNode(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2")
	st.AddNode(constraintNode("no-driver", func(n *pb.Node) { delete(n.Drivers, "mock") }))
	st.AddNode(constraintNode("darwin", func(n *pb.Node) { n.Fingerprint.Os = "darwin" }))
	st.AddNode(constraintNode("down", func(n *pb.Node) { n.Status = pb.NodeStatus_NODE_STATUS_DOWN }))
	st.AddNode(constraintNode("ineligible", func(n *pb.Node) { n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE }))
	st.AddNode(constraintNode("tiny", func(n *pb.Node) { n.Resources.MemoryMb = 100 }))
	job := systemJob()
	job.Constraints = []*pb.Constraint{{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"}}
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", placed(res), []string{"sys.web[0]@n1", "sys.web[0]@n2"})
	m := res.Eval.GetFailedTgAllocs()["web"]
	equal(t, "exhausted", m.GetDimensionExhausted(), map[string]int32{"memory": 1})
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(1))
	equal(t, "annotation", res.Plan.GetAnnotations()["web"].GetPlace(), int32(2))
}

// TestSystemNewNode: a node joining gets its alloc from the node-update
// eval; the nodes that have one are left alone.
func TestSystemNewNode(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2")
	job := systemJob()
	st.AddJob(job)
	st.AddAlloc(sysAlloc("s1", job, "n1"))
	st.AddAlloc(sysAlloc("s2", job, "n2"))
	nodes(st, "n3")
	eval := schedtest.Eval("e1", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE
	eval.NodeId = "n3"
	res := run(t, st, eval)
	equal(t, "placements", placed(res), []string{"sys.web[0]@n3"})
	equal(t, "stops", len(res.Plan.GetStops()), 0)
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{Place: 1, Ignore: 2})
}

// TestSystemStopsOnUnfitNodes: allocs on an ineligible node or a node that
// no longer satisfies the constraints are stopped; on a down node they are
// lost; none is replaced elsewhere. On a draining node the drainer decides
// when a system alloc goes (plugins after their volume users): until it
// marks the alloc for migration the scheduler leaves it, as it does under
// a drain that ignores system jobs.
func TestSystemStopsOnUnfitNodes(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "ok")
	st.AddNode(constraintNode("ineligible", func(n *pb.Node) { n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE }))
	st.AddNode(constraintNode("draining", func(n *pb.Node) { n.Drain = &pb.DrainStrategy{} }))
	st.AddNode(constraintNode("drain-ignores", func(n *pb.Node) { n.Drain = &pb.DrainStrategy{IgnoreSystemJobs: true} }))
	st.AddNode(constraintNode("down", func(n *pb.Node) { n.Status = pb.NodeStatus_NODE_STATUS_DOWN }))
	st.AddNode(constraintNode("rack2", func(n *pb.Node) { n.Meta["rack"] = "2" }))
	job := systemJob()
	job.Groups[0].Constraints = []*pb.Constraint{{Attribute: "${meta.rack}", Operator: "!=", Value: "2"}}
	st.AddJob(job)
	for _, n := range []string{"ok", "ineligible", "draining", "drain-ignores", "down", "rack2"} {
		st.AddAlloc(sysAlloc("s-"+n, job, n))
	}
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{
		"s-down:STOP:LOST", "s-ineligible:STOP:UNSPECIFIED", "s-rack2:STOP:UNSPECIFIED",
	})
	descs := map[string]string{}
	for _, s := range res.Plan.GetStops() {
		descs[s.GetAllocId()] = s.GetDesiredDescription()
	}
	equal(t, "descs", descs, map[string]string{
		"s-down":       scheduler.DescNodeLost,
		"s-ineligible": scheduler.DescNodeIneligible, "s-rack2": scheduler.DescInfeasible,
	})
	equal(t, "placements", len(res.Plan.GetAllocs()), 0)

	// The node becomes eligible again: it gets a new alloc.
	st.Apply(res.Plan)
	st.AddNode(schedtest.Node("ineligible"))
	res = run(t, st, schedtest.Eval("e2", job))
	equal(t, "placements", placed(res), []string{"sys.web[0]@ineligible"})
}

// TestSystemFailedNotReplaced: a failed system alloc stays until the job
// changes; a migrate request stops it and a new one is placed on the same
// node; no_replace leaves the node without one.
func TestSystemFailedAndMigrated(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2", "n3")
	job := systemJob()
	st.AddJob(job)
	failed := sysAlloc("s1", job, "n1")
	failed.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED
	st.AddAlloc(failed)
	mig := sysAlloc("s2", job, "n2")
	mig.DesiredTransition = &pb.DesiredTransition{Migrate: true}
	st.AddAlloc(mig)
	norep := sysAlloc("s3", job, "n3")
	norep.DesiredTransition = &pb.DesiredTransition{Migrate: true, NoReplace: true}
	st.AddAlloc(norep)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"s2:STOP:UNSPECIFIED", "s3:STOP:UNSPECIFIED"})
	equal(t, "placements", placed(res), []string{"sys.web[0]@n2"})
	st.Apply(res.Plan)
	res = run(t, st, schedtest.Eval("e2", job))
	if !res.Empty() {
		t.Errorf("second eval plans %v", res.Plan)
	}
}

// TestSystemRollingUpdate: destructive updates of a system job replace on
// the same node, max_parallel at a time; in-place ones all go.
func TestSystemRollingUpdate(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2", "n3")
	job := systemJob()
	st.AddJob(job)
	for _, n := range []string{"n1", "n2", "n3"} {
		st.AddAlloc(sysAlloc("s-"+n, job, n))
	}
	v1 := proto.Clone(job).(*pb.Job)
	v1.Version = 1
	v1.Update = &pb.UpdateStrategy{MaxParallel: 2}
	v1.Groups[0].Tasks[0].Env = map[string]string{"X": "1"}
	st.AddJob(v1)
	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "stops", stops(res), []string{"s-n1:STOP:UNSPECIFIED", "s-n2:STOP:UNSPECIFIED"})
	equal(t, "placements", placed(res), []string{"sys.web[0]@n1", "sys.web[0]@n2"})
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{DestructiveUpdate: 2, Ignore: 1})
	equal(t, "rolling follow-up", len(res.FollowUps), 1)

	v2 := proto.Clone(job).(*pb.Job)
	v2.Version = 1
	v2.Groups[0].Tasks[0].KillSignal = "SIGINT"
	st.AddJob(v2)
	res = run(t, st, schedtest.Eval("e2", v2))
	equal(t, "in place", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{InPlaceUpdate: 3})
	equal(t, "stops", len(res.Plan.GetStops()), 0)
}

// TestSystemJobStop: stopping a system job stops every alloc.
func TestSystemJobStop(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1", "n2")
	job := systemJob()
	for _, n := range []string{"n1", "n2"} {
		st.AddAlloc(sysAlloc("s-"+n, job, n))
	}
	job.Stop = true
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"s-n1:STOP:UNSPECIFIED", "s-n2:STOP:UNSPECIFIED"})
	equal(t, "placements", len(res.Plan.GetAllocs()), 0)
}
