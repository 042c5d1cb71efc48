package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// at is a fixed instant for times the commands print.
var at = time.Date(2026, 11, 23, 20, 34, 35, 610_000_000, time.UTC).UnixNano()

func wantOut(t *testing.T, args []string, wantCode int, parts ...string) string {
	t.Helper()
	out, _ := wantOutErr(t, args, wantCode, parts...)
	return out
}

// wantOutErr runs berth and checks its exit code and that each part is in
// its stdout or stderr, and returns both.
func wantOutErr(t *testing.T, args []string, wantCode int, parts ...string) (string, string) {
	t.Helper()
	code, out, errOut := berth(t, args...)
	if code != wantCode {
		t.Fatalf("berth %s: exit %d, want %d\nstdout:\n%s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errOut)
	}
	for _, p := range parts {
		if !strings.Contains(out+errOut, p) {
			t.Fatalf("berth %s: output lacks %q\nstdout:\n%s\nstderr: %s", strings.Join(args, " "), p, out, errOut)
		}
	}
	return out, errOut
}

// TestIDPrefixesResolveOrListTheCandidates resolves jobs, allocs, evals and
// nodes by exact ID and unique prefix; an ambiguous prefix names every
// candidate and an unknown one says what was looked for.
func TestIDPrefixesResolveOrListTheCandidates(t *testing.T) {
	f := newFakeCluster(t)
	for _, id := range []string{"web", "web-2", "api"} {
		f.jobs[id] = testJob(id)
	}
	place("e1", "web", "frontend", allocA, nodeA, "a1b2c3d4-0000-4000-8000-000000000000", nodeA, allocB, nodeB)(f)
	f.evals["e1"] = &pb.Evaluation{Id: "e1", JobId: "web", Status: complete}
	a := []string{"-address", f.url}

	// A job's exact ID wins over the longer IDs it is a prefix of.
	wantOut(t, append([]string{"job", "inspect"}, append(a, "web")...), 0, `"id": "web"`)
	wantOut(t, append([]string{"job", "inspect"}, append(a, "web-")...), 0, `"id": "web-2"`)
	wantOut(t, append([]string{"job", "inspect"}, append(a, "we")...), 1, `prefix "we" matches 2 jobs: web, web-2`)
	wantOut(t, append([]string{"job", "inspect"}, append(a, "db")...), 1, `no job with ID or prefix "db"`)

	wantOut(t, append([]string{"alloc", "status"}, append(a, "a1a1")...), 0, "ID                   = "+allocA)
	wantOut(t, append([]string{"alloc", "status"}, append(a, "a1")...), 1,
		`prefix "a1" matches 2 allocs: `+allocA+", a1b2c3d4-0000-4000-8000-000000000000")
	wantOut(t, append([]string{"alloc", "status"}, append(a, "ffff")...), 1, `no alloc with ID or prefix "ffff"`)
	wantOut(t, append([]string{"eval", "status"}, append(a, "e")...), 0, "ID                  = e1")

	// The lookup reads one page from the prefix on, then the object.
	f.mu.Lock()
	f.requests = nil
	f.mu.Unlock()
	wantOut(t, append([]string{"alloc", "status"}, append(a, "a2")...), 0, allocB)
	if want := []string{"GET /v1/allocations?next_token=a2&per_page=100", "GET /v1/allocation/" + allocB}; strings.Join(f.reqs(), "|") != strings.Join(want, "|") {
		t.Fatalf("alloc status a2 sent %q, want %q", f.reqs(), want)
	}
}

func runningAlloc() *pb.Allocation {
	sec := int64(time.Second)
	return &pb.Allocation{
		Id: allocA, Name: "web.frontend[0]", EvalId: evalID1, NodeId: nodeA, NodeName: "client-1", JobId: "web", JobVersion: 2, TaskGroup: "frontend",
		DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN, ClientStatus: running, ClientDescription: "Tasks are running",
		Resources: &pb.AllocResources{Tasks: map[string]*pb.TaskResources{"server": {CpuMhz: 200, MemoryMb: 128}}},
		TaskStates: map[string]*pb.TaskState{"server": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, Restarts: 1,
			StartedAt: at + 16*sec, LastRestartAt: at + sec,
			Events: []*pb.TaskEvent{
				{Type: "Received", OccurredAt: at, Message: "Task received by client"},
				{Type: "Terminated", OccurredAt: at + sec, Details: map[string]string{"exit_code": "1", "signal": "0"}},
				{Type: "Started", OccurredAt: at + 16*sec + 250_000_000, Message: "Task started by client"},
			}}},
		CreatedAt: at, ModifiedAt: at + 16*sec, CreateIndex: 40, ModifyIndex: 52,
	}
}

// TestAllocStatusShowsTasksAndEvents prints an alloc's task states with
// their events newest first and their times, and -json prints the API's
// JSON of it.
func TestAllocStatusShowsTasksAndEvents(t *testing.T) {
	f := newFakeCluster(t)
	f.allocs[allocA] = runningAlloc()
	out := wantOut(t, []string{"alloc", "status", "-address", f.url, "a1a1"}, 0)
	for _, want := range []string{
		"Client Status        = running\n",
		"Node ID              = n1n1n1n1\n",
		"Task \"server\" is \"running\"\n",
		"200 MHz  128 MiB\n",
		"Started At      = 2026-11-23T20:34:51Z\n",
		"Total Restarts  = 1\n",
		"Recent Events:\nTime                      Type        Description\n" +
			"2026-11-23T20:34:51.860Z  Started     Task started by client\n" +
			"2026-11-23T20:34:36.610Z  Terminated  exit_code=1, signal=0\n" +
			"2026-11-23T20:34:35.610Z  Received    Task received by client\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("alloc status lacks %q:\n%s", want, out)
		}
	}
	out = wantOut(t, []string{"alloc", "status", "-address", f.url, "-json", "a1a1"}, 0)
	got := &pb.Allocation{}
	if err := apijson.Unmarshal([]byte(out), got); err != nil || !proto.Equal(got, runningAlloc()) {
		t.Fatalf("alloc status -json: %v\n%s", err, out)
	}
}

// TestAllocLogsRestartAndStop: logs stream to stdout with the options as
// query parameters, an unknown task is refused naming the alloc's tasks
// before any log request, and restart and stop reach their endpoints.
func TestAllocLogsRestartAndStop(t *testing.T) {
	f := newFakeCluster(t)
	f.allocs[allocA] = runningAlloc()
	f.logs = "serving on :8080\nGET / 200\n"
	out := wantOut(t, []string{"alloc", "logs", "-address", f.url, "-f", "-stderr", "-tail", "-c", "512", "a1a1", "server"}, 0)
	if out != f.logs {
		t.Fatalf("alloc logs printed %q", out)
	}
	reqs := f.reqs()
	if want := "GET /v1/client/fs/logs/" + allocA + "?follow=true&offset=512&origin=end&task=server&type=stderr"; reqs[len(reqs)-1] != want {
		t.Fatalf("logs request %q, want %q", reqs[len(reqs)-1], want)
	}
	n := len(f.reqs())
	wantOut(t, []string{"alloc", "logs", "-address", f.url, "a1a1", "db"}, 1, `alloc `+allocA+` has no task "db"; its tasks: server`)
	for _, r := range f.reqs()[n:] {
		if strings.Contains(r, "/logs/") {
			t.Fatalf("a log request was sent for an unknown task: %s", r)
		}
	}

	wantOut(t, []string{"alloc", "restart", "-address", f.url, "a1a1", "server"}, 0, `Restarted task "server" of allocation "a1a1a1a1"`)
	if b := f.body("PUT /v1/allocation/" + allocA + "/restart"); !bytes.Contains(b, []byte(`"task":"server"`)) {
		t.Fatalf("restart body %s", b)
	}
	out = wantOut(t, []string{"alloc", "stop", "-address", f.url, "-detach", "-no-replace", "a1a1"}, 0)
	if out != evalID1+"\n" || !strings.Contains(strings.Join(f.reqs(), "\n"), "PUT /v1/allocation/"+allocA+"/stop?no_replace=true") {
		t.Fatalf("alloc stop: %q, requests %q", out, f.reqs())
	}
}

// TestJobStatusListAndDetail: the list is a table (or one JSON array), one
// job shows its groups' summary, placement failures, evaluations and
// allocs.
func TestJobStatusListAndDetail(t *testing.T) {
	f := newFakeCluster(t)
	wantOut(t, []string{"job", "status", "-address", f.url}, 0, "No jobs registered")
	job := testJob("web")
	job.Status, job.SubmittedAt, job.Version = pb.JobStatus_JOB_STATUS_RUNNING, at, 2
	f.jobs["web"] = job
	f.jobs["api"] = testJob("api")
	f.jobs["api"].Status = pb.JobStatus_JOB_STATUS_PENDING
	f.allocs[allocA] = runningAlloc()
	f.evals["e1"] = &pb.Evaluation{Id: "e1", JobId: "web", Status: complete, CreateIndex: 10, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER}
	f.evals["e2"] = &pb.Evaluation{Id: "e2", JobId: "web", Status: blocked, CreateIndex: 20, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS,
		FailedTgAllocs: map[string]*pb.AllocMetric{"frontend": {NodesEvaluated: 1, NodesExhausted: 1, DimensionExhausted: map[string]int32{"cpu": 1}}}}

	out := wantOut(t, []string{"job", "status", "-address", f.url}, 0)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], "api ") ||
		!strings.Contains(lines[2], "web  service  50        running  2        2026-11-23T20:34:35Z") {
		t.Fatalf("job status:\n%s", out)
	}
	out = wantOut(t, []string{"job", "status", "-address", f.url, "-json"}, 0)
	var stubs []struct{ ID string }
	if err := json.Unmarshal([]byte(out), &stubs); err != nil || len(stubs) != 2 || stubs[1].ID != "web" {
		t.Fatalf("job status -json: %v\n%s", err, out)
	}

	out = wantOut(t, []string{"job", "status", "-address", f.url, "web"}, 0,
		"Status        = running\n",
		"Task Group  Queued  Pending  Running  Failed  Complete  Lost\nfrontend    0       0        1        0       0         0\n",
		"Placement Failure\nTask Group \"frontend\" (failed to place 1 allocation):\n  * Resources exhausted on 1 node\n  * Dimension \"cpu\" exhausted on 1 node\n",
		"Latest Evaluations\n",
		"a1a1a1a1  n1n1n1n1  frontend    2        run      running",
	)
	// The newest evaluation leads.
	if strings.Index(out, "e2  ") > strings.Index(out, "e1  ") {
		t.Fatalf("evaluations not newest first:\n%s", out)
	}
}

// TestJobPlanExitCodes: 1 when allocations would be created or destroyed,
// 0 when nothing (or only in-place updates) would change, 255 on errors.
func TestJobPlanExitCodes(t *testing.T) {
	f := newFakeCluster(t)
	file := writeJobFile(t, testJob("web"))
	f.planResp = &pb.JobPlanResponse{JobModifyIndex: 29, DiffType: "edited", Fields: []string{"priority: 50 => 70"}, Groups: []*pb.GroupDiff{
		{Name: "frontend", Type: "edited", Updates: &pb.PlanAnnotation{Place: 1, InPlaceUpdate: 2}, Fields: []string{"count: 2 => 3"}},
		{Name: "cache", Type: "deleted", Updates: &pb.PlanAnnotation{Stop: 1}},
	}}
	out := wantOut(t, []string{"job", "plan", "-address", f.url, file}, planChanges)
	for _, want := range []string{
		"+/- Job: \"web\"\n  priority: 50 => 70\n+/- Task Group: \"frontend\" (1 create, 2 in-place update)\n      count: 2 => 3\n- Task Group: \"cache\" (1 destroy)\n",
		"Scheduler dry-run:\n- All tasks successfully allocated.\n",
		"berth job run -check-index 29 " + file + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("plan output lacks %q:\n%s", want, out)
		}
	}

	f.planResp = &pb.JobPlanResponse{JobModifyIndex: 29, DiffType: "edited", Groups: []*pb.GroupDiff{
		{Name: "frontend", Type: "edited", Updates: &pb.PlanAnnotation{InPlaceUpdate: 2}}},
		FailedTgAllocs: map[string]*pb.AllocMetric{"frontend": {NodesEvaluated: 0}}}
	wantOut(t, []string{"job", "plan", "-address", f.url, file}, planNoChange,
		"- WARNING: Failed to place all allocations.\n  Task Group \"frontend\" (failed to place 1 allocation):\n    * No nodes were eligible for evaluation\n")
	f.planResp = &pb.JobPlanResponse{DiffType: "none"}
	out = wantOut(t, []string{"job", "plan", "-address", f.url, "-json", file}, planNoChange)
	if got := (&pb.JobPlanResponse{}); apijson.Unmarshal([]byte(out), got) != nil || got.GetDiffType() != "none" {
		t.Fatalf("plan -json: %s", out)
	}

	f.planResp = nil
	wantOut(t, []string{"job", "plan", "-address", f.url, file}, planError, "planning job web: the planner broke")
	wantOut(t, []string{"job", "plan", "-address", f.url}, exitUsage, "Usage: berth job plan FILE")
}

// TestJobHistoryRevertInspectValidate covers the remaining job commands.
func TestJobHistoryRevertInspectValidate(t *testing.T) {
	f := newFakeCluster(t)
	job := testJob("web")
	job.Version = 2
	f.jobs["web"] = job
	out := wantOut(t, []string{"job", "history", "-address", f.url, "web"}, 0)
	if !strings.HasPrefix(out, "Version      = 2\nStop         = false\nSubmit Date  = -\nGroups       = frontend x3\n\nVersion      = 1\n") {
		t.Fatalf("history:\n%s", out)
	}
	out = wantOut(t, []string{"job", "revert", "-address", f.url, "-detach", "web", "1"}, 0)
	if out != evalID1+"\n" || !bytes.Contains(f.body("PUT /v1/job/web/revert"), []byte(`"version":1`)) {
		t.Fatalf("revert: %q, body %s", out, f.body("PUT /v1/job/web/revert"))
	}
	wantOut(t, []string{"job", "revert", "-address", f.url, "web", "one"}, exitUsage, `version "one" is not a version number`)

	out = wantOut(t, []string{"job", "inspect", "-address", f.url, "web"}, 0)
	got := &pb.Job{}
	if err := apijson.Unmarshal([]byte(out), got); err != nil || !proto.Equal(got, job) {
		t.Fatalf("inspect: %v\n%s", err, out)
	}

	// (writeJobFile's parser ignores the driver check; TestJobFilesAreHCL
	// runs the real one.)
	file := writeJobFile(t, testJob("db"))
	_, errOut := wantOutErr(t, []string{"job", "validate", "-address", f.url, file}, 0, `Job "db" is valid`)
	if !strings.Contains(errOut, "Only the built-in drivers (exec, raw_exec) checked: no node reports") {
		t.Fatalf("validate with no node reporting drivers said %q", errOut)
	}
	parseJobSpec = func(filename string, _ []byte, _ ...jobspec.Option) (*pb.Job, error) {
		return nil, &apiErr{text: filename + ":3:5: group \"g\": count: must not be negative"}
	}
	wantOut(t, []string{"job", "validate", "-address", f.url, file}, 1, file+`:3:5: group "g": count: must not be negative`)
}

// TestEvalStatusAndList prints an evaluation with its placement failures
// and lists evaluations with their filters as query parameters.
func TestEvalStatusAndList(t *testing.T) {
	f := newFakeCluster(t)
	f.evals[evalID1] = &pb.Evaluation{Id: evalID1, JobId: "web", Status: blocked, TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE, NodeId: nodeA,
		FailedTgAllocs:    map[string]*pb.AllocMetric{"frontend": {NodesEvaluated: 2, ConstraintFiltered: map[string]int32{"missing driver raw_exec": 2}}},
		QueuedAllocations: map[string]int32{"frontend": 2}, PlanAnnotations: map[string]*pb.PlanAnnotation{"frontend": {Place: 1, Ignore: 2}}}
	f.evals["e2"] = &pb.Evaluation{Id: "e2", JobId: "api", Status: complete}
	wantOut(t, []string{"eval", "status", "-address", f.url, "e00"}, 0,
		"Status              = blocked\n", "Triggered By        = node-update\n", "Node ID             = n1n1n1n1\n",
		"Task Group \"frontend\": 1 create, 2 ignore\n",
		"Failed Placements\nTask Group \"frontend\" (failed to place 1 allocation):\n  * Constraint \"missing driver raw_exec\": 2 nodes excluded by filter\nTask Group \"frontend\": 2 queued\n")
	out := wantOut(t, []string{"eval", "list", "-address", f.url, "-status", "blocked", "-job", "web"}, 0)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "e0000001  0         node-update   web     n1n1n1n1  blocked  true") {
		t.Fatalf("eval list:\n%s", out)
	}
	if r := f.reqs(); r[len(r)-1] != "GET /v1/evaluations?job=web&per_page=1000&status=blocked" {
		t.Fatalf("eval list sent %q", r[len(r)-1])
	}
}

// TestNodeDrainEligibilityAndGC: the drain strategy the flags describe,
// the confirmation, ending a drain, eligibility and system gc.
func TestNodeDrainEligibilityAndGC(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_READY}
	drainPath := "PUT /v1/node/" + nodeA + "/drain"
	drainBody := func() *pb.NodeDrainRequest {
		t.Helper()
		req := &pb.NodeDrainRequest{}
		if err := apijson.Unmarshal(f.body(drainPath), req); err != nil {
			t.Fatalf("drain body %s: %v", f.body(drainPath), err)
		}
		return req
	}
	wantOut(t, []string{"node", "drain", "-address", f.url, "-enable", "-deadline", "30m", "-ignore-system", "-yes", "n1"}, 0, `Node "n1n1n1n1" drain strategy set`)
	if got := drainBody(); !proto.Equal(got, &pb.NodeDrainRequest{Drain: &pb.DrainStrategy{DeadlineMs: 1_800_000, IgnoreSystemJobs: true}}) {
		t.Fatalf("drain request %v", got)
	}
	wantOut(t, []string{"node", "drain", "-address", f.url, "-enable", "-force", "-yes", "n1"}, 0)
	if got := drainBody(); got.GetDrain().GetDeadlineMs() != -1 {
		t.Fatalf("-force sent %v", got)
	}
	wantOut(t, []string{"node", "drain", "-address", f.url, "-disable", "n1"}, 0, `Node "n1n1n1n1" drain strategy unset`)
	if got := drainBody(); !proto.Equal(got, &pb.NodeDrainRequest{MarkEligible: true}) {
		t.Fatalf("-disable sent %v", got)
	}
	wantOut(t, []string{"node", "drain", "-address", f.url, "n1"}, exitUsage, "give exactly one of -enable and -disable")
	wantOut(t, []string{"node", "drain", "-address", f.url, "-disable", "-deadline", "1m", "n1"}, exitUsage, "they go with -enable")

	// Without -yes the command asks; anything but y leaves the node alone.
	for answer, wantCode := range map[string]int{"n\n": 1, "": 1, "y\n": 0} {
		f.mu.Lock()
		f.bodies = map[string][]byte{}
		f.mu.Unlock()
		var out, errOut bytes.Buffer
		code := runWithInput([]string{"berth", "node", "drain", "-address", f.url, "-enable", "n1"}, strings.NewReader(answer), &out, &errOut)
		if code != wantCode || !strings.Contains(out.String(), `Are you sure you want to enable drain mode for node "n1n1n1n1" (client-1)? [y/N]`) {
			t.Fatalf("answer %q: exit %d\n%s%s", answer, code, out.String(), errOut.String())
		}
		if sent := f.body(drainPath) != nil; sent != (wantCode == 0) {
			t.Fatalf("answer %q: drain sent = %v", answer, sent)
		}
	}

	wantOut(t, []string{"node", "eligibility", "-address", f.url, "-disable", "n1"}, 0, `Node "n1n1n1n1" scheduling eligibility set: ineligible for scheduling`)
	if b := f.body("PUT /v1/node/" + nodeA + "/eligibility"); !bytes.Contains(b, []byte(`"eligibility":"ineligible"`)) {
		t.Fatalf("eligibility body %s", b)
	}
	wantOut(t, []string{"system", "gc", "-address", f.url}, 0, "Garbage collected 4 evaluations, 1 allocation and 0 jobs\n")
}

// TestNodeFence: the fence is asked for, confirmed, sent; -unfence lifts
// it without asking; the servers' refusal of a ready node is shown.
func TestNodeFence(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Name: "client-1", Status: pb.NodeStatus_NODE_STATUS_DOWN}
	fencePath := "PUT /v1/node/" + nodeA + "/fence"
	fenceBody := func() *pb.NodeFenceRequest {
		t.Helper()
		req := &pb.NodeFenceRequest{}
		if err := apijson.Unmarshal(f.body(fencePath), req); err != nil {
			t.Fatalf("fence body %s: %v", f.body(fencePath), err)
		}
		return req
	}
	wantOut(t, []string{"node", "fence", "-address", f.url, "-yes", "n1"}, 0, `Node "n1n1n1n1" fenced: its volume claims are being released`)
	if got := fenceBody(); !proto.Equal(got, &pb.NodeFenceRequest{Fenced: proto.Bool(true)}) {
		t.Fatalf("fence request %v", got)
	}
	wantOut(t, []string{"node", "fence", "-address", f.url, "-unfence", "n1"}, 0, `Node "n1n1n1n1" unfenced`)
	if got := fenceBody(); !proto.Equal(got, &pb.NodeFenceRequest{Fenced: proto.Bool(false)}) {
		t.Fatalf("-unfence sent %v", got)
	}
	wantOut(t, []string{"node", "fence", "-address", f.url}, exitUsage, "exactly one node ID")

	for answer, wantCode := range map[string]int{"n\n": 1, "": 1, "yes\n": 0} {
		f.mu.Lock()
		f.bodies = map[string][]byte{}
		f.mu.Unlock()
		var out, errOut bytes.Buffer
		code := runWithInput([]string{"berth", "node", "fence", "-address", f.url, "n1"}, strings.NewReader(answer), &out, &errOut)
		if code != wantCode || !strings.Contains(out.String(), `Is node "n1n1n1n1" (client-1) off? Fencing it releases its volumes for other nodes. [y/N]`) {
			t.Fatalf("answer %q: exit %d\n%s%s", answer, code, out.String(), errOut.String())
		}
		if sent := f.body(fencePath) != nil; sent != (wantCode == 0) {
			t.Fatalf("answer %q: fence sent = %v", answer, sent)
		}
		if wantCode != 0 && !strings.Contains(errOut.String(), "not fenced: not confirmed") {
			t.Fatalf("answer %q: stderr %q does not say the node was not fenced", answer, errOut.String())
		}
	}

	// node status says a node is fenced, and only then.
	if out := wantOut(t, []string{"node", "status", "-address", f.url, "n1"}, 0); strings.Contains(out, "Fenced") {
		t.Fatalf("node status of a node that is not fenced:\n%s", out)
	}
	f.mu.Lock()
	f.nodes[nodeA].Fenced, f.nodes[nodeA].FencedAt = true, time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC).UnixNano()
	f.mu.Unlock()
	wantOut(t, []string{"node", "status", "-address", f.url, "n1"}, 0, "Fenced              = since 2026-11-2", "(berth node fence -unfence lifts it)")

	f.mu.Lock()
	f.nodes[nodeA].Status, f.nodes[nodeA].Fenced = pb.NodeStatus_NODE_STATUS_READY, false
	f.mu.Unlock()
	_, errOut := wantOutErr(t, []string{"node", "fence", "-address", f.url, "-yes", "n1"}, 1)
	if !strings.Contains(errOut, "is ready: it still heartbeats") {
		t.Fatalf("fence of a ready node said %q, want the servers' refusal", errOut)
	}
}

// TestJobFilesAreHCL goes through host/jobspec itself: validate accepts the
// example job, checks its tasks against the drivers the nodes report, and
// reports every error of a broken file with file:line:col; run registers
// what the file says.
func TestJobFilesAreHCL(t *testing.T) {
	f := newFakeCluster(t)
	f.nodes[nodeA] = &pb.Node{Id: nodeA, Drivers: map[string]*pb.DriverInfo{
		"raw_exec": {Name: "raw_exec", Healthy: true, TaskSchema: &driverpb.Schema{Fields: []*driverpb.Field{
			{Name: "command", Type: sdk.TypeString, Required: true}, {Name: "args", Type: sdk.TypeList}}}},
		"docker": {Name: "docker"}, // no schema: not a driver validate knows
	}}
	good := filepath.Join("..", "..", "examples", "jobs", "web.hcl")
	_, errOut := wantOutErr(t, []string{"job", "validate", "-address", f.url, good}, 0, `Job "web" is valid`)
	if errOut != "" {
		t.Fatalf("validate with driver schemas said %q", errOut)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("job \"web\" {\n  group \"g\" {\n    cuont = 2\n    task \"t\" {\n      driver = \"raw_exec\"\n      kill_timeout = \"soon\"\n      config { comand = \"x\" }\n    }\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := wantOut(t, []string{"job", "validate", "-address", f.url, bad}, 1, bad+":3:5", "cuont", bad+":6", "comand")
	if out != "" {
		t.Fatalf("validate printed %q to stdout for a broken file", out)
	}
	// No agent: the file is still checked, the drivers are not, and it says so.
	_, errOut = wantOutErr(t, []string{"job", "validate", "-address", "127.0.0.1:1", good}, 0, `Job "web" is valid`)
	if !strings.Contains(errOut, "Only the built-in drivers (exec, raw_exec) checked: no agent answered at http://127.0.0.1:1") {
		t.Fatalf("validate without an agent said %q", errOut)
	}
	// Without an agent a built-in driver's config is still checked, and a
	// driver that is not built in is named as unchecked, not refused.
	offline := filepath.Join(dir, "offline.hcl")
	if err := os.WriteFile(offline, []byte("job \"web\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      config { comand = \"x\" }\n    }\n    task \"u\" {\n      driver = \"podman\"\n    }\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantOut(t, []string{"job", "validate", "-address", "127.0.0.1:1", offline}, 1, offline+":5", "comand")
	if err := os.WriteFile(offline, []byte("job \"web\" {\n  group \"g\" {\n    task \"u\" {\n      driver = \"podman\"\n    }\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut = wantOutErr(t, []string{"job", "validate", "-address", "127.0.0.1:1", offline}, 0, `Job "web" is valid`)
	if !strings.Contains(errOut, `Driver "podman" not checked: it is not built in`) {
		t.Fatalf("validate of a third-party driver without an agent said %q", errOut)
	}
	// With an agent, a driver neither built in nor on any node is refused
	// with its position and a suggestion.
	if err := os.WriteFile(offline, []byte("job \"web\" {\n  group \"g\" {\n    task \"u\" {\n      driver = \"raw_exex\"\n      config { command = \"x\" }\n    }\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantOut(t, []string{"job", "validate", "-address", f.url, offline}, 1, offline+":4", `no driver "raw_exex"`, `did you mean "raw_exec"`)

	wantOut(t, []string{"job", "run", "-address", f.url, "-detach", good}, 0, evalID1)
	req := &pb.JobRegisterRequest{}
	if err := apijson.Unmarshal(f.body("PUT /v1/jobs"), req); err != nil {
		t.Fatal(err)
	}
	if g := req.GetJob().GetGroups(); req.GetJob().GetId() != "web" || len(g) != 1 || g[0].GetName() != "app" || g[0].GetCount() != 2 {
		t.Fatalf("registered %v", req.GetJob())
	}
}
