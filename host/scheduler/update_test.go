package scheduler_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// TestGroupUpdateKinds: which changes restart allocs, by Nomad's rule.
func TestGroupUpdateKinds(t *testing.T) {
	base := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 3).Groups[0]
	base.Tasks[0].Config = map[string]*driverpb.ConfigValue{"run_for": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "10s"}}}
	cases := []struct {
		name string
		mut  func(*pb.TaskGroup)
		want scheduler.UpdateKind
	}{
		{"same", func(*pb.TaskGroup) {}, scheduler.UpdateNone},
		{"count", func(g *pb.TaskGroup) { g.Count = 9 }, scheduler.UpdateInPlace},
		{"constraints", func(g *pb.TaskGroup) { g.Constraints = []*pb.Constraint{{Attribute: "${meta.x}", Operator: "is_set"}} }, scheduler.UpdateInPlace},
		{"restart", func(g *pb.TaskGroup) { g.Restart = &pb.RestartPolicy{Attempts: 3} }, scheduler.UpdateInPlace},
		{"reschedule", func(g *pb.TaskGroup) { g.Reschedule = &pb.ReschedulePolicy{Unlimited: true} }, scheduler.UpdateInPlace},
		{"update", func(g *pb.TaskGroup) { g.Update = &pb.UpdateStrategy{MaxParallel: 2} }, scheduler.UpdateInPlace},
		{"kill timeout", func(g *pb.TaskGroup) { g.Tasks[0].KillTimeoutMs = 9000 }, scheduler.UpdateInPlace},
		{"resources default spelled out", func(g *pb.TaskGroup) {
			g.Tasks[0].Resources = &pb.TaskResources{CpuMhz: 500, MemoryMb: 256}
		}, scheduler.UpdateNone},
		{"driver", func(g *pb.TaskGroup) { g.Tasks[0].Driver = "raw_exec" }, scheduler.UpdateDestructive},
		{"config", func(g *pb.TaskGroup) {
			g.Tasks[0].Config["run_for"] = &driverpb.ConfigValue{Kind: &driverpb.ConfigValue_StringValue{StringValue: "20s"}}
		}, scheduler.UpdateDestructive},
		{"env", func(g *pb.TaskGroup) { g.Tasks[0].Env = map[string]string{"A": "1"} }, scheduler.UpdateDestructive},
		{"resources", func(g *pb.TaskGroup) { g.Tasks[0].Resources.MemoryMb = 512 }, scheduler.UpdateDestructive},
		{"user", func(g *pb.TaskGroup) { g.Tasks[0].User = "nobody" }, scheduler.UpdateDestructive},
		{"task meta", func(g *pb.TaskGroup) { g.Tasks[0].Meta = map[string]string{"a": "b"} }, scheduler.UpdateDestructive},
		{"group meta", func(g *pb.TaskGroup) { g.Meta = map[string]string{"a": "b"} }, scheduler.UpdateDestructive},
		{"task added", func(g *pb.TaskGroup) { g.Tasks = append(g.Tasks, &pb.Task{Name: "side", Driver: "mock"}) }, scheduler.UpdateDestructive},
		{"task renamed", func(g *pb.TaskGroup) { g.Tasks[0].Name = "other" }, scheduler.UpdateDestructive},
		{"lifecycle", func(g *pb.TaskGroup) { g.Tasks[0].Lifecycle = &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_PRESTART} }, scheduler.UpdateDestructive},
		{"volume mount", func(g *pb.TaskGroup) { g.Tasks[0].VolumeMounts = []*pb.VolumeMount{{Volume: "v"}} }, scheduler.UpdateDestructive},
	}
	for _, tc := range cases {
		g := proto.Clone(base).(*pb.TaskGroup)
		tc.mut(g)
		if got := scheduler.GroupUpdate(base, g); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRollingUpdateMaxParallel: a destructive change replaces at most
// max_parallel allocs per eval (the group's update overrides the job's),
// leaves the rest running (annotated ignore) and asks for a rolling-update
// follow-up; the next eval waits while the new allocs are not yet healthy,
// and goes on when they are.
func TestRollingUpdateMaxParallel(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	v1 := proto.Clone(job).(*pb.Job)
	v1.Version = 1
	v1.Update = &pb.UpdateStrategy{MaxParallel: 3}
	v1.Groups[0].Update = &pb.UpdateStrategy{MaxParallel: 1, MinHealthyMs: 5000}
	v1.Groups[0].Tasks[0].Env = map[string]string{"V": "1"}
	st.AddJob(v1)
	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
	equal(t, "desc", res.Plan.GetStops()[0].GetDesiredDescription(), scheduler.DescUpdated)
	equal(t, "placements", len(res.Plan.GetAllocs()), 1)
	a := res.Plan.GetAllocs()[0]
	equal(t, "new alloc", []any{a.GetName(), a.GetJobVersion(), a.GetPreviousAllocation()}, []any{"j.web[0]", uint64(1), "a0"})
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{DestructiveUpdate: 1, Ignore: 2})
	if len(res.FollowUps) != 1 {
		t.Fatalf("follow-ups: %v", res.FollowUps)
	}
	f := res.FollowUps[0]
	equal(t, "rolling eval", []any{f.GetTriggeredBy(), f.GetStatus(), f.GetWaitUntil(), res.Eval.GetNextEval()},
		[]any{pb.EvalTrigger_EVAL_TRIGGER_ROLLING_UPDATE, pb.EvalStatus_EVAL_STATUS_PENDING, now + 5_000_000_000, f.GetId()})
	st.Apply(res.Plan)

	// The new alloc is still pending: nothing more is replaced.
	res = runAt(t, st, f, f.GetWaitUntil())
	equal(t, "while pending", []int{len(res.Plan.GetStops()), len(res.Plan.GetAllocs()), len(res.FollowUps)}, []int{0, 0, 1})

	// Running for min_healthy: the next one goes.
	started := st.Alloc(a.GetId())
	started.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING
	started.TaskStates = map[string]*pb.TaskState{"task": {StartedAt: now}}
	res = runAt(t, st, f, now+6_000_000_000)
	equal(t, "next batch", stops(res), []string{"a1:STOP:UNSPECIFIED"})
	equal(t, "follow-up", len(res.FollowUps), 1)
}

// TestRollingUpdateAllAtOnce: max_parallel 0 replaces every alloc in one
// eval, with no follow-up.
func TestRollingUpdateAllAtOnce(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	v1 := proto.Clone(job).(*pb.Job)
	v1.Version = 1
	v1.Groups[0].Tasks[0].Driver = "raw_exec"
	st.AddJob(v1)
	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "stops", len(res.Plan.GetStops()), 3)
	equal(t, "placements", len(res.Plan.GetAllocs()), 3)
	equal(t, "follow-ups", len(res.FollowUps), 0)
	for _, a := range res.Plan.GetAllocs() {
		if a.GetPreviousAllocation() == "" || a.GetJobVersion() != 1 {
			t.Errorf("alloc %s: previous %q version %d", a.GetName(), a.GetPreviousAllocation(), a.GetJobVersion())
		}
	}
}

// TestInPlaceUpdate: a change that needs no restart moves every alloc to
// the new version in the plan's allocs (same IDs, same nodes), whatever
// max_parallel says, and stops nothing.
func TestInPlaceUpdate(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	v1 := proto.Clone(job).(*pb.Job)
	v1.Version = 1
	v1.Update = &pb.UpdateStrategy{MaxParallel: 1}
	v1.Meta = map[string]string{"owner": "ops"}
	v1.Groups[0].Tasks[0].KillTimeoutMs = 20_000
	st.AddJob(v1)
	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "stops", len(res.Plan.GetStops()), 0)
	equal(t, "follow-ups", len(res.FollowUps), 0)
	var got []string
	for _, a := range res.Plan.GetAllocs() {
		old := st.Alloc(a.GetId())
		if old == nil || old.GetNodeId() != a.GetNodeId() || a.GetJobVersion() != 1 || a.GetEvalId() != "e1" {
			t.Errorf("in-place alloc %v does not match the stored one %v", a, old)
		}
		got = append(got, a.GetId())
	}
	equal(t, "updated", got, []string{"a0", "a1", "a2"})
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{InPlaceUpdate: 3})

	// A new constraint the alloc's node fails turns in place into
	// destructive: the alloc moves.
	st, job = runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	v1 = proto.Clone(job).(*pb.Job)
	v1.Version = 1
	v1.Groups[0].Constraints = []*pb.Constraint{{Attribute: "${node.unique.id}", Operator: "!=", Value: "n1"}}
	st.AddJob(v1)
	res = run(t, st, schedtest.Eval("e2", v1))
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
	ann := res.Plan.GetAnnotations()["web"]
	equal(t, "annotation", []int32{ann.GetInPlaceUpdate(), ann.GetDestructiveUpdate()}, []int32{2, 1})
}

// TestDestructiveUpdateWithoutRoom: a replacement that finds no node
// leaves the old alloc running.
func TestDestructiveUpdateWithoutRoom(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	st.AddJob(job)
	st.AddAlloc(schedtest.Alloc("a0", job, 0, "n1"))
	v1 := proto.Clone(job).(*pb.Job)
	v1.Version = 1
	v1.Groups[0].Tasks[0].Resources.MemoryMb = 9000
	st.AddJob(v1)
	res := run(t, st, schedtest.Eval("e1", v1))
	equal(t, "stops", len(res.Plan.GetStops()), 0)
	equal(t, "allocs", len(res.Plan.GetAllocs()), 0)
	equal(t, "exhausted", res.Eval.GetFailedTgAllocs()["web"].GetDimensionExhausted(), map[string]int32{"memory": 1})

	// With room on its own node once it stops, the replacement goes there.
	v2 := proto.Clone(job).(*pb.Job)
	v2.Version = 2
	v2.Groups[0].Tasks[0].Resources.MemoryMb = 7000
	st.AddJob(v2)
	res = run(t, st, schedtest.Eval("e2", v2))
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
	equal(t, "placements", placed(res), []string{"j.web[0]@n1"})
}
