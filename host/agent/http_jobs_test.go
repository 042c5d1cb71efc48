package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// call sends a request to base (an agent's URL) and reads the whole reply.
func call(t *testing.T, base, method, path, body string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

func (r reply) wantOK(t *testing.T, out proto.Message) {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if out != nil {
		if err := apijson.Unmarshal(r.body, out); err != nil {
			t.Fatalf("decoding %s: %v", r.body, err)
		}
	}
}

func testJob(id string) *pb.Job {
	return &pb.Job{Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "web", Count: 2, Tasks: []*pb.Task{{Name: "server", Driver: "raw_exec",
			Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64}}}}}}
}

func registerBody(t *testing.T, req *pb.JobRegisterRequest) string {
	t.Helper()
	b, err := apijson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJobWritesReachTheJobsService sends each job write over HTTP and
// checks the request the Jobs service got and the reply the caller got.
func TestJobWritesReachTheJobsService(t *testing.T) {
	f := newFakeServers(t)
	job := testJob("web")
	for i, method := range []string{"PUT", "POST"} {
		r := call(t, f.url, method, "/v1/jobs", registerBody(t, &pb.JobRegisterRequest{Job: job, EnforceIndex: true, JobModifyIndex: uint64(i)}))
		resp := &pb.JobRegisterResponse{}
		r.wantOK(t, resp)
		if resp.GetEvalId() != "e-web" || resp.GetVersion() != uint64(i) || r.header.Get(HeaderIndex) != strconv.FormatUint(resp.GetMeta().GetIndex(), 10) {
			t.Fatalf("%s /v1/jobs = %v, %s %s", method, resp, HeaderIndex, r.header.Get(HeaderIndex))
		}
		got := f.state.requests("Jobs.Register")[i].(*pb.JobRegisterRequest)
		if !proto.Equal(got, &pb.JobRegisterRequest{Job: job, EnforceIndex: true, JobModifyIndex: uint64(i)}) {
			t.Fatalf("%s: the Jobs service got %v", method, got)
		}
	}

	got := &pb.Job{}
	call(t, f.url, "GET", "/v1/job/web", "").wantOK(t, got)
	if got.GetId() != "web" || got.GetVersion() != 1 || len(got.GetGroups()) != 1 {
		t.Fatalf("GET /v1/job/web = %v", got)
	}
	summary := &pb.JobSummary{}
	call(t, f.url, "GET", "/v1/job/web/summary", "").wantOK(t, summary)
	if summary.GetGroups()["web"].GetRunning() != 2 {
		t.Fatalf("summary = %v", summary)
	}
	versions, err := apijson.UnmarshalList(call(t, f.url, "GET", "/v1/job/web/versions", "").body, func() *pb.Job { return &pb.Job{} })
	if err != nil || len(versions) != 2 || versions[0].GetVersion() != 1 || versions[1].GetVersion() != 0 {
		t.Fatalf("versions = %v, %v", versions, err)
	}

	rev := &pb.JobRegisterResponse{}
	call(t, f.url, "POST", "/v1/job/web/revert", `{"version": 0, "enforce_prior_version": true, "prior_version": 1}`).wantOK(t, rev)
	if want := (&pb.JobRevertRequest{JobId: "web", Version: 0, EnforcePriorVersion: true, PriorVersion: 1}); !proto.Equal(f.state.requests("Jobs.Revert")[0], want) {
		t.Fatalf("revert request = %v, want %v", f.state.requests("Jobs.Revert")[0], want)
	}

	f.jobs.planResp = &pb.JobPlanResponse{JobModifyIndex: 12, DiffType: "edited",
		Groups: []*pb.GroupDiff{{Name: "web", Type: "edited", Updates: &pb.PlanAnnotation{Place: 1}, Fields: []string{"count: 2 => 3"}}}}
	plan := &pb.JobPlanResponse{}
	b, _ := apijson.Marshal(&pb.JobPlanRequest{Job: job})
	call(t, f.url, "PUT", "/v1/job/web/plan", string(b)).wantOK(t, plan)
	if !proto.Equal(plan, f.jobs.planResp) || !proto.Equal(f.state.requests("Jobs.Plan")[0].(*pb.JobPlanRequest).GetJob(), job) {
		t.Fatalf("plan = %v", plan)
	}

	dereg := &pb.JobDeregisterResponse{}
	call(t, f.url, "DELETE", "/v1/job/web?purge=true", "").wantOK(t, dereg)
	call(t, f.url, "DELETE", "/v1/job/other", "").wantOK(t, nil)
	reqs := f.state.requests("Jobs.Deregister")
	if dereg.GetEvalId() != "e-stop-web" || !proto.Equal(reqs[0], &pb.JobDeregisterRequest{JobId: "web", Purge: true}) ||
		!proto.Equal(reqs[1], &pb.JobDeregisterRequest{JobId: "other"}) {
		t.Fatalf("deregister: %v, requests %v", dereg, reqs)
	}
	call(t, f.url, "GET", "/v1/job/web", "").wantError(t, 404, "not_found", "job web")
}

// TestJobIDsAreEscaped: a job ID is the user's, so it may hold a slash or
// a space; the Go client escapes it once and the agent hands it on whole.
func TestJobIDsAreEscaped(t *testing.T) {
	f := newFakeServers(t)
	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	const id = "team/web frontend%"
	if _, err := c.Jobs().Register(context.Background(), testJob(id), nil); err != nil {
		t.Fatal(err)
	}
	job, _, err := c.Jobs().Info(context.Background(), id, nil)
	if err != nil || job.GetId() != id {
		t.Fatalf("Info(%q) = %v, %v", id, job, err)
	}
	if got := f.state.requests("Jobs.Get")[0].(*pb.JobGetRequest).GetJobId(); got != id {
		t.Fatalf("the Jobs service was asked for %q", got)
	}
}

// TestJobListIsPagedAndBlocks follows /v1/jobs page by page, then holds a
// blocking query until a register moves the index past it.
func TestJobListIsPagedAndBlocks(t *testing.T) {
	f := newFakeServers(t)
	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("job-%02d", i)
		want = append(want, id)
		if _, err := c.Jobs().Register(ctx, testJob(id), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Jobs().Register(ctx, testJob("other"), nil); err != nil {
		t.Fatal(err)
	}

	r := call(t, f.url, "GET", "/v1/jobs?per_page=3&prefix=job-", "")
	page, err := apijson.UnmarshalList(r.body, func() *pb.JobListStub { return &pb.JobListStub{} })
	if err != nil || len(page) != 3 || page[0].GetId() != "job-00" || r.header.Get(HeaderNextToken) != "job-03" {
		t.Fatalf("first page: %v %v, next %q", page, err, r.header.Get(HeaderNextToken))
	}
	if q := f.state.requests("Jobs.List")[0].(*pb.JobListRequest); q.GetPrefix() != "job-" || q.GetQuery().GetPerPage() != 3 {
		t.Fatalf("list request = %v", q)
	}

	var ids []string
	pages := 0
	for p, err := range api.Pages(ctx, &api.QueryOptions{PerPage: 3, Params: map[string]string{"prefix": "job-"}}, c.Jobs().List) {
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range p.Items {
			ids = append(ids, s.GetId())
		}
	}
	if !slices.Equal(ids, want) || pages != 3 {
		t.Fatalf("pages: %d, %v; want 3, %v", pages, ids, want)
	}

	// A blocking query waits for the next change and returns it.
	_, meta, err := c.Jobs().List(ctx, nil)
	if err != nil || meta.LastIndex == 0 {
		t.Fatalf("list: %v %v", meta, err)
	}
	type result struct {
		stubs []*pb.JobListStub
		meta  *api.QueryMeta
		err   error
	}
	done := make(chan result, 1)
	go func() {
		stubs, m, err := c.Jobs().List(ctx, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 60e9})
		done <- result{stubs, m, err}
	}()
	<-f.state.waiting
	if _, err := c.Jobs().Register(ctx, testJob("late"), nil); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil || res.meta.LastIndex <= meta.LastIndex || !slices.ContainsFunc(res.stubs, func(s *pb.JobListStub) bool { return s.GetId() == "late" }) {
		t.Fatalf("blocking list returned %v at index %d (blocked at %d), %v", res.stubs, res.meta.LastIndex, meta.LastIndex, res.err)
	}
	q := f.state.requests("Jobs.List")
	if last := q[len(q)-1].(*pb.JobListRequest).GetQuery(); last.GetMinIndex() != meta.LastIndex || last.GetMaxWaitMs() != 60_000 {
		t.Fatalf("blocking query sent as %v", last)
	}
}

// TestBadBodiesAre400NamingTheField sends malformed and half-given writes:
// each is refused by the agent with 400 invalid_argument naming what was
// wrong, and no service is called.
func TestBadBodiesAre400NamingTheField(t *testing.T) {
	f := newFakeServers(t)
	for _, tc := range []struct {
		method, path, body, want string
	}{
		{"PUT", "/v1/jobs", "", "request body: empty"},
		{"PUT", "/v1/jobs", `{"job": {"id": "web", "grups": []}}`, `job.grups`},
		{"PUT", "/v1/jobs", `{"job": {"id": "web", "priority": "high"}}`, `job.priority`},
		{"PUT", "/v1/jobs", `{"job": {"id": "web", "type": "servise"}}`, `job.type`},
		{"PUT", "/v1/jobs", `{"job": {"id": "web", "groups": [{"name": "g", "count": 1.5}]}}`, `job.groups[0].count`},
		{"PUT", "/v1/jobs", `{"job": {"id": "web"}} trailing`, "request body"},
		{"PUT", "/v1/jobs", `{"enforce_index": true}`, "job is required"},
		{"PUT", "/v1/jobs", `{"job": {"name": "web"}}`, "job.id is required"},
		{"PUT", "/v1/jobs", `{"job": {"id": "web"}, "job_modify_index": 4}`, "enforce_index is false"},
		{"PUT", "/v1/job/web/plan", `{"job": {"id": "api"}}`, `job.id "api" differs from "web"`},
		{"PUT", "/v1/job/web/plan", `{}`, "job is required"},
		{"PUT", "/v1/job/web/revert", `{"job_id": "api", "version": 1}`, `job_id "api" differs from "web"`},
		{"PUT", "/v1/job/web/revert", `{"version": -1}`, "version"},
		{"PUT", "/v1/job/web/revert", `{"version": 1, "prior_version": 3}`, "enforce_prior_version is false"},
		{"PUT", "/v1/node/n1/drain", `{"drain": {"deadline_ms": "1h"}}`, "drain.deadline_ms"},
		{"PUT", "/v1/node/n1/drain", `{"drain": {"deadline_ms": 1, "started_at": "2026-11-23T20:34:35Z"}}`, "drain.started_at"},
		{"PUT", "/v1/node/n1/drain", `{"node_id": "n2", "drain": null}`, `node_id "n2" differs from "n1"`},
		{"PUT", "/v1/node/n1/eligibility", `{"eligibility": "maybe"}`, "eligibility"},
		{"PUT", "/v1/node/n1/eligibility", `{}`, "eligibility is required"},
		{"PUT", "/v1/allocation/a1/restart", `{"task": 3}`, "task"},
		{"PUT", "/v1/allocation/a1/restart", `{"alloc_id": "a2"}`, `alloc_id "a2" differs from "a1"`},
		{"PUT", "/v1/allocation/a1/stop?no_replace=perhaps", "", `no_replace="perhaps"`},
		{"DELETE", "/v1/job/web?purge=yes please", "", `purge="yes please"`},
		{"GET", "/v1/evaluations?status=done", "", `status="done": must be one of pending, blocked, complete, failed, canceled`},
		{"GET", "/v1/jobs?per_page=0", "", `per_page="0"`},
		{"GET", "/v1/allocations?index=x", "", `index="x"`},
		{"GET", "/v1/client/fs/logs/a1?type=both", "", `type="both": must be stdout or stderr`},
		{"GET", "/v1/client/fs/logs/a1?origin=middle", "", `origin="middle"`},
		{"GET", "/v1/client/fs/logs/a1?offset=-4", "", `offset="-4"`},
		{"GET", "/v1/client/fs/logs/a1?follow=sometimes", "", `follow="sometimes"`},
	} {
		call(t, f.url, tc.method, strings.ReplaceAll(tc.path, " ", "%20"), tc.body).wantError(t, 400, "invalid_argument", tc.want)
	}
	f.state.mu.Lock()
	defer f.state.mu.Unlock()
	for method, reqs := range f.state.reqs {
		t.Errorf("%s was called %d times for requests the agent should refuse: %v", method, len(reqs), reqs)
	}
}

// TestServerRefusalsKeepTheirCodes: what the services refuse reaches the
// caller with the HTTP status of its gRPC code and the service's message.
func TestServerRefusalsKeepTheirCodes(t *testing.T) {
	f := newFakeServers(t)
	f.state.failNext("Jobs.Register", status.Error(codes.FailedPrecondition, "job web: job_modify_index is 9, not 4"))
	call(t, f.url, "PUT", "/v1/jobs", `{"job": {"id": "web"}, "enforce_index": true, "job_modify_index": 4}`).
		wantError(t, 409, "failed_precondition", "job web: job_modify_index is 9, not 4")
	f.state.failNext("NodeOps.UpdateDrain", status.Error(codes.NotFound, "node n1: node not found"))
	call(t, f.url, "PUT", "/v1/node/n1/drain", `{"drain": {"deadline_ms": 60000}}`).wantError(t, 404, "not_found", "node n1")
	f.state.failNext("ClientProxy.RestartAlloc", status.Error(codes.Unavailable, "node n1 is down"))
	call(t, f.url, "POST", "/v1/allocation/a1/restart", "").wantError(t, 503, "unavailable", "node n1 is down")
	f.state.failNext("System.GarbageCollect", status.Error(codes.Unavailable, "no leader"))
	call(t, f.url, "PUT", "/v1/system/gc", "").wantError(t, 503, "unavailable", "no leader")
	call(t, f.url, "GET", "/v1/allocation/nope", "").wantError(t, 404, "not_found", "alloc nope")
	call(t, f.url, "GET", "/v1/evaluation/nope", "").wantError(t, 404, "not_found", "eval nope")
	call(t, f.url, "PATCH", "/v1/jobs", "").wantError(t, 405, "method_not_allowed", "PATCH")
	call(t, f.url, "GET", "/v1/system/gc", "").wantError(t, 405, "method_not_allowed", "GET")
	call(t, f.url, "PUT", "/v1/job/web", "").wantError(t, 405, "method_not_allowed", "PUT")
}
