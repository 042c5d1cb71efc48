package cli

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

const (
	evalID1 = "e0000001-0000-4000-8000-000000000000"
	allocA  = "a1a1a1a1-0000-4000-8000-00000000000a"
	allocB  = "a2a2a2a2-0000-4000-8000-00000000000b"
	nodeA   = "n1n1n1n1-0000-4000-8000-000000000001"
	nodeB   = "n2n2n2n2-0000-4000-8000-000000000002"
)

var (
	pending  = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
	running  = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING
	failed   = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED
	complete = pb.EvalStatus_EVAL_STATUS_COMPLETE
	blocked  = pb.EvalStatus_EVAL_STATUS_BLOCKED
)

// blockingReads counts the reads sent with ?index=, the only way the
// monitor may wait.
func blockingReads(reqs []string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, "GET ") && strings.Contains(r, "index=") {
			n++
		}
	}
	return n
}

// TestJobRunFollowsEvaluationAndAllocsToRunning runs a job whose
// evaluation places two allocs that then start one after the other: the
// monitor prints each step, Nomad style, and exits 0 once both run.
func TestJobRunFollowsEvaluationAndAllocsToRunning(t *testing.T) {
	f := newFakeCluster(t)
	job := testJob("web")
	file := writeJobFile(t, job)
	f.script = []step{
		func(f *fakeCluster) {
			setEval(evalID1, complete, nil)(f)
			place(evalID1, "web", "frontend", allocA, nodeA, allocB, nodeB)(f)
		},
		setAlloc(allocA, running, "Tasks are running", "", nil),
		setAlloc(allocB, running, "Tasks are running", "", nil),
	}
	code, out, errOut := berth(t, "job", "run", "-address", f.url, file)
	want := `==> Monitoring evaluation "e0000001"
    Evaluation triggered by job-register of job "web"
    Evaluation status changed: "pending" -> "complete"
    Allocation "a1a1a1a1" created: node "n1n1n1n1", group "frontend"
    Allocation "a2a2a2a2" created: node "n2n2n2n2", group "frontend"
==> Evaluation "e0000001" finished with status "complete"
==> Monitoring 2 allocations until they are running
    Allocation "a1a1a1a1" status changed: "pending" -> "running"
    Allocation "a2a2a2a2" status changed: "pending" -> "running"
==> All 2 allocations are running
`
	if code != 0 || out != want || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
	reqs := f.reqs()
	register := &pb.JobRegisterRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/jobs"), register); err != nil || !proto.Equal(register, &pb.JobRegisterRequest{Job: job}) {
		t.Fatalf("register body %s (%v), want the job alone", f.body("PUT /v1/jobs"), err)
	}
	// The first read waits for the register's index, every later one but
	// the list of what the evaluation placed waits for a change: four
	// blocking reads, one per step and the first, and no other wait.
	if reqs[1] != "GET /v1/evaluation/"+evalID1+"?index=100" || blockingReads(reqs) != 4 || len(reqs) != 6 {
		t.Fatalf("requests: %q", reqs)
	}
	if len(f.script) != 0 {
		t.Fatalf("%d steps left: the monitor stopped before the allocs ran", len(f.script))
	}
}

// TestJobRunReportsPlacementFailure: an evaluation that could not place
// the group ends the command with exit 3 (exitPlacementFailed) and the scheduler's reasons.
func TestJobRunReportsPlacementFailure(t *testing.T) {
	f := newFakeCluster(t)
	file := writeJobFile(t, testJob("web"))
	f.script = []step{setEval(evalID1, blocked, map[string]*pb.AllocMetric{"frontend": {
		NodesEvaluated: 3, NodesFiltered: 1, NodesExhausted: 2, CoalescedFailures: 1,
		ConstraintFiltered: map[string]int32{"${attr.kernel.name} = linux": 1},
		DimensionExhausted: map[string]int32{"memory": 2},
	}})}
	code, out, errOut := berth(t, "job", "run", "-address", f.url, file)
	want := `==> Monitoring evaluation "e0000001"
    Evaluation triggered by job-register of job "web"
    Evaluation status changed: "pending" -> "blocked"
==> Evaluation "e0000001" finished with status "blocked" but failed to place all allocations:
    Task Group "frontend" (failed to place 2 allocations):
      * Constraint "${attr.kernel.name} = linux": 1 node excluded by filter
      * Resources exhausted on 2 nodes
      * Dimension "memory" exhausted on 2 nodes
    The evaluation waits for additional capacity to place remainder
`
	if code != exitPlacementFailed || out != want || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", code, out, want, errOut)
	}
}

// TestJobRunReportsAFailedAlloc: a task that cannot start shows its event
// while the alloc is pending, and the alloc's failure ends the command
// with exit 3 (exitPlacementFailed) and the reason.
func TestJobRunReportsAFailedAlloc(t *testing.T) {
	f := newFakeCluster(t)
	file := writeJobFile(t, testJob("web"))
	driverFailure := &pb.TaskEvent{Type: "Driver Failure", Failed: true, Message: `exec: "pyhton3": executable file not found in $PATH`}
	f.script = []step{
		func(f *fakeCluster) {
			setEval(evalID1, complete, nil)(f)
			place(evalID1, "web", "frontend", allocA, nodeA)(f)
		},
		setAlloc(allocA, pending, "", "server", &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_PENDING,
			Events: []*pb.TaskEvent{{Type: "Received"}, driverFailure, {Type: "Restarting", Message: "Task restarting in 15s"}}}),
		setAlloc(allocA, failed, "Failed tasks", "server", &pb.TaskState{State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, Failed: true,
			Events: []*pb.TaskEvent{{Type: "Received"}, driverFailure, {Type: "Restarting"}, driverFailure,
				{Type: "Not Restarting", Failed: true, Message: "Exceeded allowed attempts 1 in interval 30m0s"}}}),
	}
	code, out, _ := berth(t, "job", "run", "-address", f.url, file)
	want := `==> Evaluation "e0000001" finished with status "complete"
==> Monitoring 1 allocation until it is running
    Task "server" of allocation "a1a1a1a1": Driver Failure: exec: "pyhton3": executable file not found in $PATH
    Allocation "a1a1a1a1" status changed: "pending" -> "failed"
    Task "server" of allocation "a1a1a1a1": Driver Failure: exec: "pyhton3": executable file not found in $PATH
    Task "server" of allocation "a1a1a1a1": Not Restarting: Exceeded allowed attempts 1 in interval 30m0s
==> Allocation "a1a1a1a1" failed: Failed tasks; task "server": Not Restarting: Exceeded allowed attempts 1 in interval 30m0s
`
	if code != exitPlacementFailed || !strings.HasSuffix(out, want) {
		t.Fatalf("exit %d\nstdout:\n%s\nwant it to end with:\n%s", code, out, want)
	}
}

// TestJobRunDetachAndCheckIndex: -detach prints the evaluation ID alone
// and reads nothing; -check-index makes the register conditional, and a
// refusal is the agent's error with exit 1.
func TestJobRunDetachAndCheckIndex(t *testing.T) {
	f := newFakeCluster(t)
	file := writeJobFile(t, testJob("web"))
	code, out, errOut := berth(t, "job", "run", "-address", f.url, "-detach", "-check-index", "0", file)
	if code != 0 || out != evalID1+"\n" || errOut != "" {
		t.Fatalf("-detach: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if reqs := f.reqs(); len(reqs) != 1 {
		t.Fatalf("-detach sent %q, want the register alone", reqs)
	}
	register := &pb.JobRegisterRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/jobs"), register); err != nil || !register.GetEnforceIndex() || register.GetJobModifyIndex() != 0 {
		t.Fatalf("-check-index 0 sent %s", f.body("PUT /v1/jobs"))
	}

	code, _, errOut = berth(t, "job", "run", "-address", "127.0.0.1:1", file)
	if code != 1 || !strings.Contains(errOut, "PUT /v1/jobs") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Fatalf("unreachable agent: exit %d, %q", code, errOut)
	}
	code, _, errOut = berth(t, "job", "run", "-address", f.url, file+".missing")
	if code != 1 || !strings.Contains(errOut, "reading job file") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
}

// TestJobStopFollowsTheEvaluation stops a job by a prefix of its ID.
func TestJobStopFollowsTheEvaluation(t *testing.T) {
	f := newFakeCluster(t)
	f.jobs["web"] = testJob("web")
	f.jobs["api"] = testJob("api")
	f.script = []step{setEval(evalID1, complete, nil)}
	code, out, errOut := berth(t, "job", "stop", "-address", f.url, "-purge", "we")
	if code != 0 || !strings.HasSuffix(out, "==> Evaluation \"e0000001\" finished with status \"complete\"\n") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(strings.Join(f.reqs(), "\n"), "DELETE /v1/job/web?purge=true") {
		t.Fatalf("requests %q lack the purge", f.reqs())
	}
}
