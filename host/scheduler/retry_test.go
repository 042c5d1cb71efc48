package scheduler_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// TestDelayedEvalsBatched: failed allocs whose reschedule times are within
// 5 s share one delayed eval (waiting for the latest); others get their
// own; a waiting alloc whose index is scaled away gets none.
func TestDelayedEvalsBatched(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 5)
	job.Groups[0].Reschedule = &pb.ReschedulePolicy{DelayMs: 30_000, Unlimited: true}
	const s = int64(1_000_000_000)
	failedAlloc(st, "a0", now)
	failedAlloc(st, "a1", now+2*s)
	failedAlloc(st, "a2", now+20*s)
	failedAlloc(st, "a4", now)
	job.Groups[0].Count = 4 // a4's index goes away
	res := run(t, st, schedtest.Eval("e1", job))
	if len(res.FollowUps) != 2 {
		t.Fatalf("follow-ups: %v", res.FollowUps)
	}
	equal(t, "wait_until", []int64{res.FollowUps[0].GetWaitUntil(), res.FollowUps[1].GetWaitUntil()}, []int64{now + 32*s, now + 50*s})
	links := map[string]string{}
	for _, st := range res.Plan.GetStops() {
		links[st.GetAllocId()] = st.GetFollowupEvalId()
	}
	equal(t, "links", links, map[string]string{"a0": "e1-1", "a1": "e1-1", "a2": "e1-2"})
}

// TestMigrateReplacementRetried: a migrated alloc whose replacement found
// no node is replaced by a later eval, linked to it.
func TestMigrateReplacementRetried(t *testing.T) {
	st := schedtest.NewState()
	n1 := schedtest.Node("n1")
	n1.Drain = &pb.DrainStrategy{}
	st.AddNode(n1)
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	st.AddJob(job)
	a := schedtest.Alloc("a0", job, 0, "n1")
	a.DesiredTransition = &pb.DesiredTransition{Migrate: true}
	st.AddAlloc(a)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(1))
	st.Apply(res.Plan)
	nodes(st, "n2")
	res = run(t, st, schedtest.Eval("e2", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@n2"})
	equal(t, "previous", res.Plan.GetAllocs()[0].GetPreviousAllocation(), "a0")
}

// TestRescheduledFailsToPlace: a failed alloc due for reschedule that
// finds no node is not stopped, so the next eval retries it.
func TestRescheduledFailsToPlace(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	job.Groups[0].Tasks[0].Resources.MemoryMb = 5000
	st.AddJob(job)
	st.AddAlloc(schedtest.Alloc("a0", job, 0, "n1"))
	failedAlloc(st, "a0", now-3_600_000_000_000)
	blocker := schedtest.Job("b", pb.JobType_JOB_TYPE_SERVICE, 1)
	blocker.Groups[0].Tasks[0].Resources.MemoryMb = 4000
	st.AddAlloc(schedtest.Alloc("b0", blocker, 0, "n1"))
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", len(res.Plan.GetStops()), 0)
	equal(t, "failed", res.Eval.GetFailedTgAllocs()["web"].GetDimensionExhausted(), map[string]int32{"memory": 1})
}

// TestSystemNodeVanished: a system alloc whose node is gone from the state
// is lost.
func TestSystemNodeVanished(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	job := systemJob()
	st.AddJob(job)
	st.AddAlloc(sysAlloc("s1", job, "n1"))
	st.AddAlloc(sysAlloc("s-gone", job, "gone"))
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"s-gone:STOP:LOST"})
	equal(t, "placements", len(res.Plan.GetAllocs()), 0)
}

// TestPlanJobUnchanged: planning the stored job again changes nothing and
// keeps the version.
func TestPlanJobUnchanged(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 2)
	resp, res, err := scheduler.PlanJob(st, proto.Clone(job).(*pb.Job), scheduler.Options{Now: now, NewID: schedtest.Seq("p")})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "diff", resp.GetDiffType(), scheduler.DiffNone)
	equal(t, "updates", resp.GetGroups()[0].GetUpdates(), &pb.PlanAnnotation{Ignore: 2})
	equal(t, "version", res.Plan.GetJobVersion(), uint64(0))
	if !res.Empty() {
		t.Errorf("plan: %v", res.Plan)
	}
}

// TestBlockedEvalReblocks: a blocked eval run again places what now fits
// and, if some still do not, comes back blocked itself with no new
// blocked eval; once everything fits it completes.
func TestBlockedEvalReblocks(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 20)
	job.Groups[0].Tasks[0].Resources.CpuMhz = 1000
	st.AddJob(job)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placed", len(res.Plan.GetAllocs()), 4)
	blocked := res.FollowUps[0]
	st.Apply(res.Plan)

	nodes(st, "n2")
	blocked.Status = pb.EvalStatus_EVAL_STATUS_PENDING
	res = run(t, st, blocked)
	equal(t, "placed", len(res.Plan.GetAllocs()), 4)
	equal(t, "status", []any{res.Eval.GetStatus(), res.Eval.GetBlockedEval(), len(res.FollowUps)}, []any{pb.EvalStatus_EVAL_STATUS_BLOCKED, "", 0})
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(12))
	st.Apply(res.Plan)

	job.Groups[0].Count = 8
	res = run(t, st, blocked)
	equal(t, "status", res.Eval.GetStatus(), pb.EvalStatus_EVAL_STATUS_COMPLETE)
}
