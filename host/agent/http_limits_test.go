package agent

import (
	"context"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
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

// A request body is bounded by what the largest job server.job_max_size
// lets through needs as the Go API client sends it, not by the 64 MiB of a
// gRPC message: a body is read whole and parsed, so each request may cost
// several times its size. The largest job, written with JSON's worst
// escaping, still fits.
func TestRequestBodiesAreBoundedByTheJobSizeLimit(t *testing.T) {
	registerExpansion, registerSlack := registerBound()
	if got, want := startAgent(t, DevConfig()).maxBodyBytes(), int64(registerExpansion)<<20+int64(registerSlack)+1<<20; got != want || registerExpansion > 16 {
		t.Fatalf("body limit with server.job_max_size at its default: %d, want %d (%d per encoded byte)", got, want, registerExpansion)
	}
	cfg := DevConfig()
	cfg.Server.JobLimits.MaxBytes = 64 << 10
	a := startAgent(t, cfg)
	limit := a.maxBodyBytes()
	if limit != int64(registerExpansion)*(64<<10)+int64(registerSlack)+1<<20 {
		t.Fatalf("body limit with server.job_max_size 64KiB: %d", limit)
	}
	over := `{"job": {"id": "x", "meta": {"m": "` + strings.Repeat("x", int(limit)) + `"}}}`
	r := do(t, a, "PUT", "/v1/jobs", strings.NewReader(over))
	r.wantError(t, 400, "invalid_argument", "request body: larger than "+strconv.FormatInt(limit, 10)+" bytes")

	// Control characters: one encoded byte each, six in JSON.
	j := testJob("escaped")
	j.Groups[0].Tasks[0].Driver = "mock"
	j.Meta = map[string]string{"blob": strings.Repeat("\x01", 63<<10)}
	body := registerBody(t, &pb.JobRegisterRequest{Job: j})
	if len(body) < 5*(63<<10) {
		t.Fatalf("the escaped job's body is %d bytes: the test no longer escapes", len(body))
	}
	do(t, a, "PUT", "/v1/jobs", strings.NewReader(body)).wantOK(t, nil)
}

// A job within server.job_max_size fits the body limit as the Go API client
// sends it: a list of empty strings is 2 encoded bytes an element, 20 in
// the indented rendering with every field (which the client once sent: an
// 800 KB job became an 8 MB body, refused), 3 in the compact one it sends.
func TestAJobWithinJobMaxSizeFitsTheBodyLimitAsTheClientSendsIt(t *testing.T) {
	a := testAgent(t)
	j := testJob("wide")
	j.Groups[0].Count = 1
	j.Groups[0].Tasks[0].Config = map[string]*driverpb.ConfigValue{
		"command": sdk.StringValue("true"),
		"args":    sdk.ListValue(make([]string, 400000)...),
	}
	limits := jobspec.Limits{}.WithDefaults()
	if err := jobspec.CheckLimits(j, limits); err != nil {
		t.Fatalf("the job is over a limit: %v", err)
	}
	c, err := api.NewClient("http://" + a.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Jobs().Register(context.Background(), j, nil); err != nil {
		t.Errorf("a job of %d bytes encoded (job_max_size %d), sent by the Go API client: %v", proto.Size(j), limits.MaxBytes, err)
	}
}

// A snapshot restore streams its body to the leader: the body limit of the
// bodies read whole does not apply (a state larger than seven job limits is
// ordinary), so a large archive reaches the server's checks.
func TestSnapshotRestoreBodyIsNotHeldToTheBodyLimit(t *testing.T) {
	cfg := DevConfig()
	cfg.Server.JobLimits.MaxBytes = 64 << 10
	a := startAgent(t, cfg)
	archive := "BERTHSNP" + strings.Repeat("\x00", int(a.maxBodyBytes())+1)
	r := do(t, a, "PUT", "/v1/operator/snapshot", strings.NewReader(archive))
	if r.status != 400 || strings.Contains(string(r.body), "request body: larger than") || !strings.Contains(string(r.body), "snapshot") {
		t.Fatalf("restore of a large garbage archive: %d %s; want 400 from the archive's checks", r.status, r.body)
	}
}

// A snapshot restore's upload is unauthenticated: it is refused on its
// first bytes when they are not a berth snapshot, and once it passes
// server.snapshot_restore_max_size, without being buffered whole (an
// endless upload filled the leader's disk).
func TestSnapshotRestoreUploadIsBounded(t *testing.T) {
	cfg := DevConfig()
	cfg.Server.SnapshotRestoreMaxBytes = 1 << 20
	a := startAgent(t, cfg)
	// Endless: answered only if the server stops reading.
	r := do(t, a, "PUT", "/v1/operator/snapshot", io.MultiReader(strings.NewReader("NOTASNAP"), &endlessX{n: math.MaxInt64}))
	r.wantError(t, 400, "invalid_argument", `does not start with "BERTHSNP": not a berth snapshot`)

	r = do(t, a, "PUT", "/v1/operator/snapshot", io.MultiReader(strings.NewReader("BERTHSNP"), &endlessX{n: math.MaxInt64}))
	r.wantError(t, 400, "invalid_argument", "over 1048576 bytes (server.snapshot_restore_max_size)")
}
