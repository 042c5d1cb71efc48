package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// recorder is an agent that records each request (method, escaped path
// with query, body) and answers with the next canned reply.
type recorder struct {
	mu   sync.Mutex
	seen []string
	body map[string]string
	// reply answers by "METHOD path"; missing ones are {}.
	reply map[string]string
}

func newRecorder(t *testing.T) (*recorder, *Client) {
	t.Helper()
	rec := &recorder{body: map[string]string{}, reply: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Method + " " + r.URL.EscapedPath()
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Method+" "+r.URL.RequestURI())
		rec.body[key] = string(b)
		out, ok := rec.reply[key]
		rec.mu.Unlock()
		if !ok {
			out = "{}"
		}
		w.Header().Set("X-Berth-Index", "7")
		_, _ = w.Write([]byte(out))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return rec, c
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[len(r.seen)-1]
}

// TestJobMethodsSendTheirRequests checks each Jobs method's HTTP method,
// path (IDs escaped once), query and body, and that replies decode.
func TestJobMethodsSendTheirRequests(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	job := &pb.Job{Id: "team/web 1", Groups: []*pb.TaskGroup{{Name: "g", Count: 2}}}
	const esc = "team%2Fweb%201"

	rec.reply["PUT /v1/jobs"] = `{"eval_id": "e1", "version": 3, "job_modify_index": 0, "warnings": [], "meta": {"index": 9}}`
	resp, err := c.Jobs().Register(ctx, job, &RegisterOptions{EnforceIndex: true, ModifyIndex: 5})
	if err != nil || resp.GetEvalId() != "e1" || resp.GetVersion() != 3 || resp.GetMeta().GetIndex() != 9 {
		t.Fatalf("Register = %v, %v", resp, err)
	}
	got := &pb.JobRegisterRequest{}
	if err := apijson.Unmarshal([]byte(rec.body["PUT /v1/jobs"]), got); err != nil ||
		!proto.Equal(got, &pb.JobRegisterRequest{Job: job, EnforceIndex: true, JobModifyIndex: 5}) {
		t.Fatalf("register body %s (%v)", rec.body["PUT /v1/jobs"], err)
	}
	if _, err := c.Jobs().Register(ctx, nil, nil); err == nil {
		t.Fatal("Register(nil) was sent")
	}

	for _, tc := range []struct {
		call func() error
		want string
	}{
		{func() error { _, _, err := c.Jobs().Info(ctx, job.Id, &QueryOptions{WaitIndex: 4}); return err }, "GET /v1/job/" + esc + "?index=4"},
		{func() error { _, _, err := c.Jobs().Summary(ctx, job.Id, nil); return err }, "GET /v1/job/" + esc + "/summary"},
		{func() error { _, err := c.Jobs().Deregister(ctx, job.Id, true); return err }, "DELETE /v1/job/" + esc + "?purge=true"},
		{func() error { _, err := c.Jobs().Deregister(ctx, job.Id, false); return err }, "DELETE /v1/job/" + esc},
		{func() error { _, err := c.Jobs().Plan(ctx, job); return err }, "PUT /v1/job/" + esc + "/plan"},
		{func() error { p := uint64(2); _, err := c.Jobs().Revert(ctx, job.Id, 1, &p); return err }, "PUT /v1/job/" + esc + "/revert"},
		{func() error { _, err := c.Allocations().Stop(ctx, "a/1", true); return err }, "PUT /v1/allocation/a%2F1/stop?no_replace=true"},
		{func() error { return c.Allocations().Restart(ctx, "a1", "web") }, "PUT /v1/allocation/a1/restart"},
		{func() error { _, _, err := c.Allocations().Info(ctx, "a1", nil); return err }, "GET /v1/allocation/a1"},
		{func() error {
			_, _, err := c.Evaluations().Info(ctx, "e1", &QueryOptions{Consistent: true})
			return err
		}, "GET /v1/evaluation/e1?consistent=true"},
		{func() error {
			_, err := c.NodeOps().Drain(ctx, "n1", &pb.DrainStrategy{DeadlineMs: -1}, false)
			return err
		}, "PUT /v1/node/n1/drain"},
		{func() error { _, err := c.NodeOps().Eligibility(ctx, "n1", true); return err }, "PUT /v1/node/n1/eligibility"},
		{func() error { _, err := c.NodeOps().Fence(ctx, "n1", true); return err }, "PUT /v1/node/n1/fence"},
		{func() error { _, err := c.System().GC(ctx); return err }, "PUT /v1/system/gc"},
	} {
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.want, err)
		}
		if got := rec.last(); got != tc.want {
			t.Fatalf("sent %q, want %q", got, tc.want)
		}
	}
	for path, want := range map[string]proto.Message{
		"PUT /v1/job/" + esc + "/plan":   &pb.JobPlanRequest{Job: job},
		"PUT /v1/job/" + esc + "/revert": &pb.JobRevertRequest{Version: 1, EnforcePriorVersion: true, PriorVersion: 2},
		"PUT /v1/allocation/a1/restart":  &pb.RestartAllocRequest{Task: "web"},
		"PUT /v1/node/n1/drain":          &pb.NodeDrainRequest{Drain: &pb.DrainStrategy{DeadlineMs: -1}},
		"PUT /v1/node/n1/eligibility":    &pb.NodeEligibilityRequest{Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE},
		"PUT /v1/node/n1/fence":          &pb.NodeFenceRequest{Fenced: proto.Bool(true)},
	} {
		got := want.ProtoReflect().New().Interface()
		if err := apijson.Unmarshal([]byte(rec.body[path]), got); err != nil || !proto.Equal(got, want) {
			t.Errorf("%s body %s (%v), want %v", path, rec.body[path], err, want)
		}
	}
	if rec.body["PUT /v1/system/gc"] != "" || rec.body["DELETE /v1/job/"+esc] != "" {
		t.Errorf("bodies sent where none belong: gc %q, deregister %q", rec.body["PUT /v1/system/gc"], rec.body["DELETE /v1/job/"+esc])
	}
}

// TestListMethodsArePages: each list method sends its filters and page
// options and returns the page's next token.
func TestListMethodsArePages(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	q := &QueryOptions{PerPage: 2, NextToken: "b", Params: map[string]string{"prefix": "b"}}
	for _, tc := range []struct {
		path string
		call func() (int, error)
	}{
		{"/v1/jobs", func() (int, error) { l, _, err := c.Jobs().List(ctx, q); return len(l), err }},
		{"/v1/job/web/allocations", func() (int, error) { l, _, err := c.Jobs().Allocations(ctx, "web", q); return len(l), err }},
		{"/v1/job/web/evaluations", func() (int, error) { l, _, err := c.Jobs().Evaluations(ctx, "web", q); return len(l), err }},
		{"/v1/job/web/versions", func() (int, error) { l, _, err := c.Jobs().Versions(ctx, "web", q); return len(l), err }},
		{"/v1/allocations", func() (int, error) { l, _, err := c.Allocations().List(ctx, q); return len(l), err }},
		{"/v1/evaluations", func() (int, error) { l, _, err := c.Evaluations().List(ctx, q); return len(l), err }},
		{"/v1/node/n1/allocations", func() (int, error) { l, _, err := c.NodeOps().Allocations(ctx, "n1", q); return len(l), err }},
	} {
		rec.reply["GET "+tc.path] = `[{"id": "b1"}, {"id": "b2"}]`
		n, err := tc.call()
		if err != nil || n != 2 {
			t.Fatalf("%s: %d items, %v", tc.path, n, err)
		}
		if got, want := rec.last(), "GET "+tc.path+"?next_token=b&per_page=2&prefix=b"; got != want {
			t.Fatalf("sent %q, want %q", got, want)
		}
	}
}

// TestLogsIsAStream: the body is handed over as it arrives, the options
// are query parameters, and an error reply is an *Error, not a stream.
func TestLogsIsAStream(t *testing.T) {
	release := make(chan struct{})
	query := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/client/fs/logs/missing" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"code": "not_found", "message": "alloc missing: alloc not found"}`))
			return
		}
		query <- r.URL.RawQuery
		_, _ = w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		<-release
		_, _ = w.Write([]byte("second\n"))
	}))
	defer srv.Close()
	c, _ := NewClient(srv.URL)
	rc, err := c.Allocations().Logs(context.Background(), "a1", LogsOptions{Task: "web", Stderr: true, Follow: true, FromEnd: true, Offset: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(rc, buf); err != nil || string(buf) != "first\n" {
		t.Fatalf("first frame %q, %v", buf, err)
	}
	if q := <-query; q != "follow=true&offset=10&origin=end&task=web&type=stderr" {
		t.Fatalf("query %q", q)
	}
	close(release)
	rest, err := io.ReadAll(rc)
	if err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	_, err = c.Allocations().Logs(context.Background(), "missing", LogsOptions{})
	if !IsNotFound(err) || !strings.Contains(err.Error(), "alloc missing") {
		t.Fatalf("Logs(missing) = %v", err)
	}
	if _, err := c.Allocations().Logs(context.Background(), "a1", LogsOptions{Offset: -1}); err == nil {
		t.Fatal("a negative offset was sent")
	}
}
