package agent

import (
	"os"
	"path/filepath"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// TestJobParseTurnsSourceIntoTheAPIsJob posts job files to
// /v1/jobs/parse: HCL and JSON come back as the job PUT /v1/jobs takes,
// defaults filled in; a file with errors is 400 naming line, column and
// field; no server is asked.
func TestJobParseTurnsSourceIntoTheAPIsJob(t *testing.T) {
	f := newFakeServers(t)
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "jobs", "web.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	job := &pb.Job{}
	call(t, f.url, "POST", "/v1/jobs/parse?filename=web.hcl", string(src)).wantOK(t, job)
	g := job.GetGroups()
	if job.GetId() != "web" || len(g) != 1 || g[0].GetCount() != 2 || g[0].GetTasks()[0].GetDriver() != "raw_exec" ||
		g[0].GetTasks()[0].GetKillTimeoutMs() != 10_000 || job.GetPriority() != 50 || job.GetSourceFile() != "web.hcl" {
		t.Fatalf("parsed job = %v", job)
	}

	jsonJob := &pb.Job{}
	call(t, f.url, "PUT", "/v1/jobs/parse?format=json",
		`{"job": {"batch": {"type": "batch", "group": {"g": {"task": {"t": {"driver": "raw_exec", "config": {"command": "true"}}}}}}}}`).wantOK(t, jsonJob)
	if jsonJob.GetId() != "batch" || jsonJob.GetType() != pb.JobType_JOB_TYPE_BATCH || jsonJob.GetGroups()[0].GetCount() != 1 {
		t.Fatalf("parsed JSON job = %v", jsonJob)
	}

	call(t, f.url, "POST", "/v1/jobs/parse", "job \"web\" {\n  group \"g\" {\n    cuont = 2\n  }\n}\n").
		wantError(t, 400, "invalid_argument", `job.hcl:3:5`)
	call(t, f.url, "POST", "/v1/jobs/parse?filename=x.hcl", "job \"web\" {\n  group \"g\" {\n    count = -1\n  }\n}\n").
		wantError(t, 400, "invalid_argument", `x.hcl:3`)
	call(t, f.url, "POST", "/v1/jobs/parse?format=yaml", "").wantError(t, 400, "invalid_argument", `format="yaml"`)
	call(t, f.url, "POST", "/v1/jobs/parse?format=json&filename=web.hcl", "{}").wantError(t, 400, "invalid_argument", "must end in .json")
	call(t, f.url, "GET", "/v1/jobs/parse", "").wantError(t, 405, "method_not_allowed", "GET")
	f.state.mu.Lock()
	defer f.state.mu.Unlock()
	if len(f.state.reqs) != 0 {
		t.Fatalf("parsing called the servers: %v", f.state.reqs)
	}
}
