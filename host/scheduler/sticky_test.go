package scheduler_test

import (
	"testing"

	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// stickyJob is a one-alloc service job whose group volume "data" names
// host volume "data", sticky when sticky; its reschedules are immediate.
func stickyJob(sticky bool) *pb.Job {
	job := hostVolumeJob(pb.JobType_JOB_TYPE_SERVICE, 1, "data", false)
	job.Groups[0].Volumes["data"].Sticky = sticky
	job.Groups[0].Reschedule = &pb.ReschedulePolicy{Unlimited: true}
	return job
}

// placeFailed places job's one alloc, applies it, and marks it failed on
// its client; it returns the alloc.
func placeFailed(t *testing.T, st *schedtest.State, job *pb.Job) *pb.Allocation {
	t.Helper()
	res := run(t, st, schedtest.Eval("e1", job))
	if len(res.Plan.GetAllocs()) != 1 {
		t.Fatalf("first placement: %v", res.Plan.GetAllocs())
	}
	st.Apply(res.Plan)
	a := st.Alloc(res.Plan.GetAllocs()[0].GetId())
	a.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED
	a.TaskStates = map[string]*pb.TaskState{"task": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, Failed: true, FinishedAt: now - 1}}
	for _, c := range mustClaimsOf(st, a.GetId()) {
		st.FreeClaim(c.GetId())
	}
	return a
}

func mustClaimsOf(st *schedtest.State, allocID string) []*pb.Claim {
	var out []*pb.Claim
	for _, n := range []string{"hv-1", "hv-2"} {
		cs, _ := st.ClaimsByVolume(n)
		for _, c := range cs {
			if c.GetAllocId() == allocID {
				out = append(out, c)
			}
		}
	}
	return out
}

// A rescheduled alloc of a group with a sticky dynamic host volume goes
// back to the volume it claimed (recorded on the alloc), though a
// reschedule avoids the node it failed on; without sticky it moves to the
// other node's volume of the name.
func TestStickyDynamicHostVolume(t *testing.T) {
	for _, sticky := range []bool{true, false} {
		st := schedtest.NewState()
		dynamicNode(st, "n1", "data", "hv-1", snw)
		dynamicNode(st, "n2", "data", "hv-2", snw)
		job := stickyJob(sticky)
		st.AddJob(job)
		first := placeFailed(t, st, job)
		want := first.GetHostVolumeIds()["data"]
		if want == "" || (want == "hv-1") != (first.GetNodeId() == "n1") {
			t.Fatalf("the first alloc on %s records host volumes %v", first.GetNodeId(), first.GetHostVolumeIds())
		}
		eval := schedtest.Eval("e2", job)
		eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_ALLOC_FAILURE
		res := run(t, st, eval)
		if len(res.Plan.GetAllocs()) != 1 {
			t.Fatalf("sticky %t: replacement: %v (failed %v)", sticky, res.Plan.GetAllocs(), res.Eval.GetFailedTgAllocs())
		}
		r := res.Plan.GetAllocs()[0]
		if got := r.GetNodeId() == first.GetNodeId(); got != sticky {
			t.Errorf("sticky %t: the replacement is on %s, the failed alloc was on %s", sticky, r.GetNodeId(), first.GetNodeId())
		}
		if sticky && (r.GetHostVolumeIds()["data"] != want || res.Plan.GetClaims()[0].GetVolumeId() != want) {
			t.Errorf("sticky: the replacement claims %v, records %v; want %s", res.Plan.GetClaims(), r.GetHostVolumeIds(), want)
		}
	}
}

// A sticky replacement whose node is down is not placed elsewhere: it
// waits, and the placement failure says why; a volume recreated under
// another ID on the node does not take it either.
func TestStickyHostVolumeWaitsForItsNode(t *testing.T) {
	st := schedtest.NewState()
	dynamicNode(st, "n1", "data", "hv-1", snw)
	dynamicNode(st, "n2", "data", "hv-2", snw)
	job := stickyJob(true)
	st.AddJob(job)
	first := placeFailed(t, st, job)
	down := schedtest.Node(first.GetNodeId())
	down.Status = pb.NodeStatus_NODE_STATUS_DOWN
	down.HostVolumes = map[string]*pb.HostVolumeInfo{"data": {Id: first.GetHostVolumeIds()["data"]}}
	st.AddNode(down)
	eval := schedtest.Eval("e2", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE
	res := run(t, st, eval)
	equal(t, "placements", placed(res), []string(nil))
	equal(t, "filtered", filtered(res, "web"), map[string]int32{
		`volume "data": sticky to node ` + first.GetNodeId() + `, where the alloc it replaces ran`: 1,
	})

	// Back, with the volume made again under another ID: still refused.
	back := schedtest.Node(first.GetNodeId())
	back.HostVolumes = map[string]*pb.HostVolumeInfo{"data": {Id: "hv-new"}}
	st.AddNode(back)
	st.AddHostVolume(&pb.HostVolume{Id: "hv-new", Name: "data", NodeId: back.GetId(), State: pb.HostVolumeState_HOST_VOLUME_STATE_READY,
		Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: fs}}})
	res = run(t, st, schedtest.Eval("e3", job))
	equal(t, "placements", placed(res), []string(nil))
	equal(t, "filtered", filtered(res, "web"), map[string]int32{
		`volume "data": sticky to node ` + first.GetNodeId() + `, where the alloc it replaces ran`:                                 1,
		`volume "data": sticky to host volume ` + first.GetHostVolumeIds()["data"] + `, which the node no longer offers as "data"`: 1,
	})
}

// A static host volume that is sticky keeps the replacement on the node.
func TestStickyStaticHostVolume(t *testing.T) {
	st := schedtest.NewState()
	st.AddNode(hostVolumeNode("n1", "data", false))
	st.AddNode(hostVolumeNode("n2", "data", false))
	job := stickyJob(true)
	st.AddJob(job)
	first := placeFailed(t, st, job)
	if len(first.GetHostVolumeIds()) != 0 {
		t.Fatalf("a static host volume recorded as dynamic: %v", first.GetHostVolumeIds())
	}
	eval := schedtest.Eval("e2", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_ALLOC_FAILURE
	res := run(t, st, eval)
	if len(res.Plan.GetAllocs()) != 1 || res.Plan.GetAllocs()[0].GetNodeId() != first.GetNodeId() {
		t.Fatalf("replacement %v, want on %s", res.Plan.GetAllocs(), first.GetNodeId())
	}
}

// A per_alloc CSI volume is sticky by its alloc index: the replacement of
// a failed alloc keeps the index, so it claims the same volume.
func TestPerAllocVolumeKeepsItsIndex(t *testing.T) {
	st := schedtest.NewState()
	pluginNodes(st, "hostpath", "n1", "n2")
	st.AddVolume(schedtest.Volume("v[0]", "hostpath", snw))
	st.AddVolume(schedtest.Volume("v[1]", "hostpath", snw))
	job := schedtest.WithVolume(schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 2), "data", "v")
	job.Groups[0].Volumes["data"].PerAlloc = true
	job.Groups[0].Volumes["data"].Sticky = true
	job.Groups[0].Reschedule = &pb.ReschedulePolicy{Unlimited: true}
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	st.Apply(res.Plan)
	var failed *pb.Allocation
	for _, a := range res.Plan.GetAllocs() {
		if a.GetIndex() == 1 {
			failed = st.Alloc(a.GetId())
		}
	}
	failed.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED
	failed.TaskStates = map[string]*pb.TaskState{"task": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, Failed: true, FinishedAt: now - 1}}
	cs, _ := st.ClaimsByVolume("v[1]")
	for _, c := range cs {
		st.FreeClaim(c.GetId())
	}
	eval := schedtest.Eval("e2", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_ALLOC_FAILURE
	res = run(t, st, eval)
	equal(t, "claims", claims(t, res), []string{"v[1]:j.web[1]@" + res.Plan.GetAllocs()[0].GetNodeId() + ":write"})
}
