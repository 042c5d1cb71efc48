package scheduler_test

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/scheduler/schedtest"
	"berth.dev/berth/rpc/pb"
)

// runningJob returns a state with nodes n1..n3 and job j of count allocs
// a0.. running, alloc i on node n(i%3+1).
func runningJob(t *testing.T, typ pb.JobType, count int32) (*schedtest.State, *pb.Job) {
	t.Helper()
	st := schedtest.NewState()
	nodes(st, "n1", "n2", "n3")
	job := schedtest.Job("j", typ, count)
	st.AddJob(job)
	for i := int32(0); i < count; i++ {
		st.AddAlloc(schedtest.Alloc("a"+string(rune('0'+i)), job, i, []string{"n1", "n2", "n3"}[i%3]))
	}
	return st, job
}

// TestNothingToDo: a job whose allocs all run as asked plans nothing.
func TestNothingToDo(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	res := run(t, st, schedtest.Eval("e1", job))
	if !res.Empty() {
		t.Errorf("plan not empty: %v", res.Plan)
	}
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{Ignore: 3})
}

// TestScaleUpAndDown: more count places the missing indexes; less stops
// the highest indexes.
func TestScaleUpAndDown(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	up := proto.Clone(job).(*pb.Job)
	up.Groups[0].Count = 5
	up.Version = 1
	st.AddJob(up)
	res := run(t, st, schedtest.Eval("e1", up))
	var names []string
	for _, a := range res.Plan.GetAllocs() {
		if a.GetJobVersion() != 1 {
			t.Errorf("alloc %s has version %d", a.GetId(), a.GetJobVersion())
		}
		names = append(names, a.GetName())
	}
	// Count is an in-place change: the three running allocs move to
	// version 1 in place, two new ones are placed.
	equal(t, "allocs", names, []string{"j.web[0]", "j.web[1]", "j.web[2]", "j.web[3]", "j.web[4]"})
	equal(t, "stops", len(res.Plan.GetStops()), 0)
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{Place: 2, InPlaceUpdate: 3})

	down := proto.Clone(job).(*pb.Job)
	down.Groups[0].Count = 1
	st, _ = runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	st.AddJob(down)
	res = run(t, st, schedtest.Eval("e2", down))
	equal(t, "stops", stops(res), []string{"a1:STOP:UNSPECIFIED", "a2:STOP:UNSPECIFIED"})
	equal(t, "description", res.Plan.GetStops()[0].GetDesiredDescription(), scheduler.DescScaledDown)
	equal(t, "allocs", len(res.Plan.GetAllocs()), 0)
}

// TestDuplicateIndexStopped: two live allocs with one index keep the
// older.
func TestDuplicateIndexStopped(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 2)
	dup := schedtest.Alloc("dup", job, 0, "n3")
	dup.CreateIndex = 99
	st.AddAlloc(dup)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"dup:STOP:UNSPECIFIED"})
	equal(t, "allocs", len(res.Plan.GetAllocs()), 0)
}

// TestJobStopAndPurge: a stopped job and a purged one stop every alloc
// that is not already stopped, failed ones included (no reschedule).
func TestJobStopAndPurge(t *testing.T) {
	for _, purge := range []bool{false, true} {
		st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
		failed := schedtest.Alloc("failed", job, 3, "n1")
		failed.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED
		st.AddAlloc(failed)
		done := schedtest.Alloc("stopped", job, 4, "n1")
		done.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
		st.AddAlloc(done)
		if purge {
			st.PurgeJob("j")
		} else {
			stopped := proto.Clone(job).(*pb.Job)
			stopped.Stop = true
			st.AddJob(stopped)
		}
		res := run(t, st, schedtest.Eval("e1", job))
		equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED", "a1:STOP:UNSPECIFIED", "a2:STOP:UNSPECIFIED", "failed:STOP:UNSPECIFIED"})
		equal(t, "allocs", len(res.Plan.GetAllocs()), 0)
		equal(t, "follow-ups", len(res.FollowUps), 0)
	}
}

// TestGroupRemoved: allocs of a group the job no longer has are stopped.
func TestGroupRemoved(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 1)
	renamed := proto.Clone(job).(*pb.Job)
	renamed.Groups[0].Name = "api"
	renamed.Version = 1
	st.AddJob(renamed)
	res := run(t, st, schedtest.Eval("e1", renamed))
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
	equal(t, "desc", res.Plan.GetStops()[0].GetDesiredDescription(), scheduler.DescGroupRemoved)
	// n1 is empty again once a0 stops; ties go to the lowest node ID.
	equal(t, "placements", placed(res), []string{"j.api[0]@n1"})
}

// TestLostNodeReplacement: allocs of a down node are marked lost and
// replaced elsewhere with the same index and a link to the lost alloc; a
// second run after the plan is applied has nothing left to do.
func TestLostNodeReplacement(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	n1 := schedtest.Node("n1")
	n1.Status = pb.NodeStatus_NODE_STATUS_DOWN
	st.AddNode(n1)
	eval := schedtest.Eval("e1", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE
	eval.NodeId = "n1"
	res := run(t, st, eval)
	equal(t, "stops", stops(res), []string{"a0:STOP:LOST"})
	equal(t, "desc", res.Plan.GetStops()[0].GetDesiredDescription(), scheduler.DescNodeLost)
	if len(res.Plan.GetAllocs()) != 1 {
		t.Fatalf("allocs: %v", res.Plan.GetAllocs())
	}
	a := res.Plan.GetAllocs()[0]
	equal(t, "replacement", []any{a.GetName(), a.GetPreviousAllocation(), a.GetNodeId() != "n1", len(a.GetRescheduleEvents())},
		[]any{"j.web[0]", "a0", true, 0})
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{Lost: 1, Ignore: 2})

	st.Apply(res.Plan)
	res = run(t, st, schedtest.Eval("e2", job))
	if !res.Empty() {
		t.Errorf("second run plans %v", res.Plan)
	}

	// A node missing from the state altogether counts as down.
	st, job = runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	allocs, _ := st.AllocsByJob("j")
	gone := proto.Clone(allocs[1]).(*pb.Allocation)
	gone.NodeId = "vanished"
	st.AddAlloc(gone)
	res = run(t, st, schedtest.Eval("e3", job))
	equal(t, "stops", stops(res), []string{"a1:STOP:LOST"})
	equal(t, "replacements", len(res.Plan.GetAllocs()), 1)
}

// TestLostReplacementRetried: a lost alloc whose replacement found no
// node is replaced by a later eval once there is room, linked to it.
func TestLostReplacementRetried(t *testing.T) {
	st := schedtest.NewState()
	nodes(st, "n1")
	job := schedtest.Job("j", pb.JobType_JOB_TYPE_SERVICE, 1)
	st.AddJob(job)
	st.AddAlloc(schedtest.Alloc("a0", job, 0, "n1"))
	down := schedtest.Node("n1")
	down.Status = pb.NodeStatus_NODE_STATUS_DOWN
	st.AddNode(down)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "stops", stops(res), []string{"a0:STOP:LOST"})
	equal(t, "queued", res.Eval.GetQueuedAllocations()["web"], int32(1))
	equal(t, "blocked", res.Eval.GetBlockedEval() != "", true)
	st.Apply(res.Plan)

	nodes(st, "n2")
	res = run(t, st, schedtest.Eval("e2", job))
	equal(t, "placements", placed(res), []string{"j.web[0]@n2"})
	equal(t, "previous", res.Plan.GetAllocs()[0].GetPreviousAllocation(), "a0")
	equal(t, "stops", len(res.Plan.GetStops()), 0)
}

// TestDrainMigrate: allocs marked to migrate are stopped and replaced on
// another node (the draining node takes nothing new); no_replace stops
// without a replacement, and the index stays empty in later evals.
func TestDrainMigrate(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	n1 := schedtest.Node("n1")
	n1.Drain = &pb.DrainStrategy{DeadlineMs: 60_000}
	n1.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE
	st.AddNode(n1)
	a0 := st.Alloc("a0")
	a0.DesiredTransition = &pb.DesiredTransition{Migrate: true}
	a1 := st.Alloc("a1")
	a1.DesiredTransition = &pb.DesiredTransition{Migrate: true, NoReplace: true}
	eval := schedtest.Eval("e1", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_NODE_DRAIN
	res := run(t, st, eval)
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED", "a1:STOP:UNSPECIFIED"})
	descs := map[string]string{}
	for _, s := range res.Plan.GetStops() {
		descs[s.GetAllocId()] = s.GetDesiredDescription()
	}
	equal(t, "descs", descs, map[string]string{"a0": scheduler.DescMigrating, "a1": scheduler.DescNoReplace})
	if len(res.Plan.GetAllocs()) != 1 {
		t.Fatalf("allocs: %v", res.Plan.GetAllocs())
	}
	a := res.Plan.GetAllocs()[0]
	equal(t, "replacement", []string{a.GetName(), a.GetPreviousAllocation()}, []string{"j.web[0]", "a0"})
	if a.GetNodeId() == "n1" {
		t.Errorf("replacement placed on the draining node")
	}
	equal(t, "annotation", res.Plan.GetAnnotations()["web"], &pb.PlanAnnotation{Migrate: 1, Stop: 1, Ignore: 1})

	st.Apply(res.Plan)
	res = run(t, st, schedtest.Eval("e2", job))
	if !res.Empty() {
		t.Errorf("after the drain plan, a second eval plans %v", res.Plan)
	}
}

func failedAlloc(st *schedtest.State, id string, finishedAt int64) *pb.Allocation {
	a := st.Alloc(id)
	a.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED
	a.TaskStates = map[string]*pb.TaskState{"task": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, Failed: true, FinishedAt: finishedAt}}
	return a
}

// TestRescheduleDelay: a failed alloc whose delay has not passed gets a
// delayed eval (wait_until = failure + delay) linked through an AllocStop
// that leaves it desired-run; the delayed eval, run at its time, replaces
// it with a reschedule event, away from the node it failed on.
func TestRescheduleDelay(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 3)
	job.Groups[0].Reschedule = &pb.ReschedulePolicy{DelayMs: 10_000, MaxDelayMs: 60_000, Unlimited: true}
	failedAlloc(st, "a0", now-2_000_000_000)
	eval := schedtest.Eval("e1", job)
	eval.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_ALLOC_FAILURE
	res := run(t, st, eval)
	equal(t, "allocs", len(res.Plan.GetAllocs()), 0)
	if len(res.FollowUps) != 1 {
		t.Fatalf("follow-ups: %v", res.FollowUps)
	}
	f := res.FollowUps[0]
	equal(t, "delayed eval", []any{f.GetTriggeredBy(), f.GetStatus(), f.GetWaitUntil(), f.GetPreviousEval()},
		[]any{pb.EvalTrigger_EVAL_TRIGGER_RETRY_FAILED_ALLOC, pb.EvalStatus_EVAL_STATUS_PENDING, now + 8_000_000_000, "e1"})
	want := &pb.AllocStop{AllocId: "a0", DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
		ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED, FollowupEvalId: f.GetId()}
	if len(res.Plan.GetStops()) != 1 || !proto.Equal(res.Plan.GetStops()[0], want) {
		t.Errorf("stops: %v, want %v", res.Plan.GetStops(), want)
	}
	st.Apply(res.Plan)

	// Another eval before the time (a second alloc failing, say) does not
	// make a second delayed eval for a0.
	res = runAt(t, st, schedtest.Eval("e2", job), now+1_000_000_000)
	if !res.Empty() || len(res.FollowUps) != 0 {
		t.Errorf("eval before the delay: plan %v follow-ups %v", res.Plan, res.FollowUps)
	}

	res = runAt(t, st, f, f.GetWaitUntil())
	if len(res.Plan.GetAllocs()) != 1 {
		t.Fatalf("allocs: %v", res.Plan.GetAllocs())
	}
	a := res.Plan.GetAllocs()[0]
	equal(t, "replacement", []any{a.GetName(), a.GetPreviousAllocation(), a.GetNodeId() != "n1"}, []any{"j.web[0]", "a0", true})
	wantEv := []*pb.RescheduleEvent{{RescheduledAt: f.GetWaitUntil(), PrevAllocId: "a0", PrevNodeId: "n1", DelayMs: 10_000}}
	equal(t, "events", a.GetRescheduleEvents(), wantEv)
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
	equal(t, "annotation", res.Plan.GetAnnotations()["web"].GetReschedule(), int32(1))
}

// TestRescheduleNowByTransition: desired_transition.reschedule skips the
// delay.
func TestRescheduleNowByTransition(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 1)
	a := failedAlloc(st, "a0", now)
	a.DesiredTransition = &pb.DesiredTransition{Reschedule: true}
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "replacement", len(res.Plan.GetAllocs()), 1)
	equal(t, "follow-ups", len(res.FollowUps), 0)
}

// TestReschedulePolicy: the delay doubles per earlier reschedule up to the
// max; attempts count the events inside the interval; unlimited ignores
// them.
func TestReschedulePolicy(t *testing.T) {
	ev := func(ats ...int64) []*pb.RescheduleEvent {
		var out []*pb.RescheduleEvent
		for _, at := range ats {
			out = append(out, &pb.RescheduleEvent{RescheduledAt: at})
		}
		return out
	}
	const s = int64(1_000_000_000)
	cases := []struct {
		name     string
		p        *pb.ReschedulePolicy
		events   []*pb.RescheduleEvent
		eligible bool
		delayMS  int64
	}{
		{"first", &pb.ReschedulePolicy{DelayMs: 5000, Unlimited: true}, nil, true, 5000},
		{"doubles", &pb.ReschedulePolicy{DelayMs: 5000, MaxDelayMs: 60_000, Unlimited: true}, ev(1, 2), true, 20_000},
		{"capped", &pb.ReschedulePolicy{DelayMs: 5000, MaxDelayMs: 30_000, Unlimited: true}, ev(1, 2, 3, 4, 5, 6), true, 30_000},
		{"huge chain", &pb.ReschedulePolicy{DelayMs: 5000, Unlimited: true}, make([]*pb.RescheduleEvent, 200), true, -1},
		{"attempts left", &pb.ReschedulePolicy{Attempts: 2, IntervalMs: 60_000, DelayMs: 1000}, ev(now - 10*s), true, 2000},
		{"attempts used", &pb.ReschedulePolicy{Attempts: 2, IntervalMs: 60_000, DelayMs: 1000}, ev(now-20*s, now-10*s), false, 0},
		{"old attempts expire", &pb.ReschedulePolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 1000}, ev(now - 120*s), true, 2000},
		{"no attempts", &pb.ReschedulePolicy{}, nil, false, 0},
	}
	for _, tc := range cases {
		a := &pb.Allocation{RescheduleEvents: tc.events, ModifiedAt: now}
		d := scheduler.Reschedule(tc.p, a, now)
		if d.Eligible != tc.eligible {
			t.Errorf("%s: eligible %v, want %v", tc.name, d.Eligible, tc.eligible)
			continue
		}
		if tc.delayMS == -1 {
			if d.DelayMS <= 0 || d.At < now {
				t.Errorf("%s: delay %d overflowed", tc.name, d.DelayMS)
			}
			continue
		}
		if tc.eligible && (d.DelayMS != tc.delayMS || d.At != now+tc.delayMS*1_000_000) {
			t.Errorf("%s: delay %d at %d, want %d", tc.name, d.DelayMS, d.At, tc.delayMS)
		}
	}
}

// TestRescheduleAttemptsExhausted: a failed alloc with no attempts left
// is left failed, holding its index: nothing is placed for it.
func TestRescheduleAttemptsExhausted(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 2)
	job.Groups[0].Reschedule = &pb.ReschedulePolicy{Attempts: 1, IntervalMs: 3_600_000, DelayMs: 1000}
	a := failedAlloc(st, "a0", now-60_000_000_000)
	a.RescheduleEvents = []*pb.RescheduleEvent{{RescheduledAt: now - 120_000_000_000, PrevAllocId: "older"}}
	res := run(t, st, schedtest.Eval("e1", job))
	if !res.Empty() || len(res.FollowUps) != 0 {
		t.Errorf("plan %v follow-ups %v", res.Plan, res.FollowUps)
	}
}

// TestBatch: a completed batch alloc is not replaced; a failed one is
// rescheduled by the batch default policy (one attempt after 5s); a
// completed service alloc is replaced.
func TestBatch(t *testing.T) {
	st, job := runningJob(t, pb.JobType_JOB_TYPE_BATCH, 2)
	st.Alloc("a0").ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE
	failedAlloc(st, "a1", now-6_000_000_000)
	res := run(t, st, schedtest.Eval("e1", job))
	equal(t, "placements", len(res.Plan.GetAllocs()), 1)
	a := res.Plan.GetAllocs()[0]
	equal(t, "rescheduled", []any{a.GetName(), a.GetPreviousAllocation(), len(a.GetRescheduleEvents())}, []any{"j.web[1]", "a1", 1})
	st.Apply(res.Plan)
	// The replacement fails too: the one attempt is used.
	failedAlloc(st, a.GetId(), now)
	res = runAt(t, st, schedtest.Eval("e2", job), now+60_000_000_000)
	if !res.Empty() {
		t.Errorf("second failure rescheduled: %v", res.Plan)
	}

	st, job = runningJob(t, pb.JobType_JOB_TYPE_SERVICE, 1)
	st.Alloc("a0").ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE
	res = run(t, st, schedtest.Eval("e3", job))
	equal(t, "service complete replaced", len(res.Plan.GetAllocs()), 1)
	equal(t, "stops", stops(res), []string{"a0:STOP:UNSPECIFIED"})
}
