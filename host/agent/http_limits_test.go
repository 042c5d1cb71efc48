package agent

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

func planBody(t *testing.T, j *pb.Job) string {
	t.Helper()
	b, err := apijson.Marshal(&pb.JobPlanRequest{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A job over a limit of the server block is refused with 400, on register
// and on plan, naming the limit, the job's value and the config key, and
// before any work: a count of two billion answers at once and leaves the
// agent's heap as it was (it took 22.9 GB and no answer before).
func TestJobsOverALimitAre400BeforeAnyWork(t *testing.T) {
	cfg := DevConfig()
	cfg.Server.JobLimits.MaxBytes = 64 << 10
	a := startAgent(t, cfg)

	huge := testJob("huge")
	huge.Groups[0].Count = math.MaxInt32
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for _, ep := range []struct{ method, path, body string }{
		{"PUT", "/v1/jobs", registerBody(t, &pb.JobRegisterRequest{Job: huge})},
		{"PUT", "/v1/job/huge/plan", planBody(t, huge)},
	} {
		r := do(t, a, ep.method, ep.path, strings.NewReader(ep.body))
		r.wantError(t, 400, "invalid_argument", `group "web": count: 2147483647 is over the limit of 1000 per group (server.job_max_count)`)
	}
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("refusing count 2^31-1 on register and plan: heap %+d bytes, %s", grew, took)
	if grew > 64<<20 || took > 10*time.Second {
		t.Fatalf("refusing count 2^31-1 twice: heap grew %d bytes in %s", grew, took)
	}

	// The size limit, set to 64 KiB here: a job just under it is taken,
	// one over it refused naming server.job_max_size.
	sized := func(id string, n int) *pb.Job {
		j := testJob(id)
		j.Groups[0].Tasks[0].Driver = "mock"
		j.Meta = map[string]string{"blob": strings.Repeat("b", n)}
		return j
	}
	r := do(t, a, "PUT", "/v1/jobs", strings.NewReader(registerBody(t, &pb.JobRegisterRequest{Job: sized("under", 60<<10)})))
	r.wantOK(t, nil)
	r = do(t, a, "PUT", "/v1/jobs", strings.NewReader(registerBody(t, &pb.JobRegisterRequest{Job: sized("over", 64<<10)})))
	r.wantError(t, 400, "invalid_argument", "over the limit of 65536 bytes (server.job_max_size)")
	if r := do(t, a, "GET", "/v1/job/over", nil); r.status != 404 {
		t.Fatalf("GET the refused job: %d %s", r.status, r.body)
	}
}
