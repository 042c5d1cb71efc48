package agent

import (
	"bufio"
	"context"
	"errors"
	"io"
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

func addAllocs(f *fakeServers) {
	f.state.update(func() {
		for _, a := range []*pb.Allocation{
			{Id: "a1000000", JobId: "web", NodeId: "n1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING},
			{Id: "a1000001", JobId: "web", NodeId: "n2", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING},
			{Id: "a2000000", JobId: "api", NodeId: "n1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED},
			{Id: "b3000000", JobId: "web", NodeId: "n1"},
		} {
			f.state.allocs[a.GetId()] = a
		}
		for _, e := range []*pb.Evaluation{
			{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_COMPLETE},
			{Id: "e2", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_BLOCKED},
			{Id: "e3", JobId: "api", Status: pb.EvalStatus_EVAL_STATUS_BLOCKED},
		} {
			f.state.evals[e.GetId()] = e
		}
	})
}

func allocIDs(t *testing.T, r reply) []string {
	t.Helper()
	r.wantOK(t, nil)
	as, err := apijson.UnmarshalList(r.body, func() *pb.Allocation { return &pb.Allocation{} })
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range as {
		ids = append(ids, a.GetId())
	}
	return ids
}

func evalIDs(t *testing.T, r reply) []string {
	t.Helper()
	r.wantOK(t, nil)
	es, err := apijson.UnmarshalList(r.body, func() *pb.Evaluation { return &pb.Evaluation{} })
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		ids = append(ids, e.GetId())
	}
	return ids
}

// TestAllocAndEvalListsFilterAndPage checks that each list's filters reach
// its service and that pages and their tokens come back.
func TestAllocAndEvalListsFilterAndPage(t *testing.T) {
	f := newFakeServers(t)
	addAllocs(f)
	for path, want := range map[string][]string{
		"/v1/allocations":                        {"a1000000", "a1000001", "a2000000", "b3000000"},
		"/v1/allocations?prefix=a1":              {"a1000000", "a1000001"},
		"/v1/allocations?node_id=n1":             {"a1000000", "a2000000", "b3000000"},
		"/v1/allocations?node_id=n1&job_id=web":  {"a1000000", "b3000000"},
		"/v1/job/web/allocations":                {"a1000000", "a1000001", "b3000000"},
		"/v1/node/n1/allocations":                {"a1000000", "a2000000", "b3000000"},
		"/v1/node/n1/allocations?next_token=a2":  {"a2000000", "b3000000"},
		"/v1/allocations?per_page=2&next_token=": {"a1000000", "a1000001"},
	} {
		if got := allocIDs(t, call(t, f.url, "GET", path, "")); !slices.Equal(got, want) {
			t.Errorf("GET %s = %v, want %v", path, got, want)
		}
	}
	if q := f.state.requests("Allocs.List"); !slices.ContainsFunc(q, func(m proto.Message) bool {
		return proto.Equal(m, &pb.AllocListRequest{Query: &pb.QueryOptions{}, NodeId: "n1", JobId: "web"})
	}) {
		t.Errorf("no Allocs.List request carried node_id and job_id: %v", q)
	}
	if r := call(t, f.url, "GET", "/v1/allocations?per_page=2", ""); r.header.Get(HeaderNextToken) != "a2000000" {
		t.Errorf("next token %q, want a2000000", r.header.Get(HeaderNextToken))
	}

	for path, want := range map[string][]string{
		"/v1/evaluations":                        {"e1", "e2", "e3"},
		"/v1/evaluations?job=web":                {"e1", "e2"},
		"/v1/evaluations?status=blocked":         {"e2", "e3"},
		"/v1/evaluations?job=web&status=blocked": {"e2"},
		"/v1/evaluations?prefix=e3":              {"e3"},
		"/v1/job/api/evaluations":                {"e3"},
	} {
		if got := evalIDs(t, call(t, f.url, "GET", path, "")); !slices.Equal(got, want) {
			t.Errorf("GET %s = %v, want %v", path, got, want)
		}
	}

	a := &pb.Allocation{}
	call(t, f.url, "GET", "/v1/allocation/a2000000", "").wantOK(t, a)
	if a.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED {
		t.Errorf("alloc = %v", a)
	}
	e := &pb.Evaluation{}
	call(t, f.url, "GET", "/v1/evaluation/e2", "").wantOK(t, e)
	if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED {
		t.Errorf("eval = %v", e)
	}
}

// TestEvalReadBlocksUntilItChanges is the read `job run` follows: a
// blocking GET of an evaluation returns once the evaluation changed, with
// the new index in X-Berth-Index.
func TestEvalReadBlocksUntilItChanges(t *testing.T) {
	f := newFakeServers(t)
	addAllocs(f)
	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	_, meta, err := c.Evaluations().Info(context.Background(), "e2", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *pb.Evaluation, 1)
	go func() {
		e, _, err := c.Evaluations().Info(context.Background(), "e2", &api.QueryOptions{WaitIndex: meta.LastIndex})
		if err != nil {
			t.Error(err)
		}
		done <- e
	}()
	<-f.state.waiting
	idx := f.state.update(func() {
		e := proto.Clone(f.state.evals["e2"]).(*pb.Evaluation)
		e.Status = pb.EvalStatus_EVAL_STATUS_COMPLETE
		f.state.evals["e2"] = e
	})
	if e := <-done; e.GetStatus() != pb.EvalStatus_EVAL_STATUS_COMPLETE {
		t.Fatalf("blocking read returned %v", e)
	}
	r := call(t, f.url, "GET", "/v1/evaluation/e2", "")
	if got := r.header.Get(HeaderIndex); got != strconv.FormatUint(idx, 10) {
		t.Fatalf("%s = %s, want %d", HeaderIndex, got, idx)
	}
}

// TestNodeOpsAllocStopRestartAndGC covers the remaining writes through the
// Go client: the request each service got and the reply.
func TestNodeOpsAllocStopRestartAndGC(t *testing.T) {
	f := newFakeServers(t)
	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	resp, err := c.NodeOps().Drain(ctx, "n1", &pb.DrainStrategy{DeadlineMs: 3_600_000, IgnoreSystemJobs: true}, false)
	if err != nil || !slices.Equal(resp.GetEvalIds(), []string{"e-drain"}) {
		t.Fatalf("Drain = %v, %v", resp, err)
	}
	if _, err := c.NodeOps().Drain(ctx, "n1", nil, true); err != nil {
		t.Fatal(err)
	}
	drains := f.state.requests("NodeOps.UpdateDrain")
	if !proto.Equal(drains[0], &pb.NodeDrainRequest{NodeId: "n1", Drain: &pb.DrainStrategy{DeadlineMs: 3_600_000, IgnoreSystemJobs: true}}) ||
		!proto.Equal(drains[1], &pb.NodeDrainRequest{NodeId: "n1", MarkEligible: true}) {
		t.Fatalf("drain requests = %v", drains)
	}
	for _, eligible := range []bool{false, true} {
		if _, err := c.NodeOps().Eligibility(ctx, "n1", eligible); err != nil {
			t.Fatal(err)
		}
	}
	el := f.state.requests("NodeOps.UpdateEligibility")
	if el[0].(*pb.NodeEligibilityRequest).GetEligibility() != pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE ||
		el[1].(*pb.NodeEligibilityRequest).GetEligibility() != pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE {
		t.Fatalf("eligibility requests = %v", el)
	}
	for _, fenced := range []bool{true, false} {
		if _, err := c.NodeOps().Fence(ctx, "n1", fenced); err != nil {
			t.Fatal(err)
		}
	}
	// Over plain HTTP an empty body fences; a body naming another node is
	// refused.
	call(t, f.url, "PUT", "/v1/node/n1/fence", "").wantOK(t, nil)
	call(t, f.url, "PUT", "/v1/node/n1/fence", `{"node_id": "n2"}`).wantError(t, 400, "invalid_argument", `"n2" differs from "n1"`)
	fences := f.state.requests("NodeOps.UpdateFence")
	yes, no := true, false
	if len(fences) != 3 || !proto.Equal(fences[0], &pb.NodeFenceRequest{NodeId: "n1", Fenced: &yes}) ||
		!proto.Equal(fences[1], &pb.NodeFenceRequest{NodeId: "n1", Fenced: &no}) || !proto.Equal(fences[2], &pb.NodeFenceRequest{NodeId: "n1"}) {
		t.Fatalf("fence requests = %v", fences)
	}

	stop, err := c.Allocations().Stop(ctx, "a1", true)
	if err != nil || stop.GetEvalId() != "e-stop-alloc" || !proto.Equal(f.state.requests("Allocs.Stop")[0], &pb.AllocStopRequest{AllocId: "a1", NoReplace: true}) {
		t.Fatalf("Stop = %v, %v; request %v", stop, err, f.state.requests("Allocs.Stop"))
	}
	if err := c.Allocations().Restart(ctx, "a1", "web"); err != nil {
		t.Fatal(err)
	}
	call(t, f.url, "POST", "/v1/allocation/a2/restart", "").wantOK(t, nil)
	rs := f.state.requests("ClientProxy.RestartAlloc")
	if !proto.Equal(rs[0], &pb.RestartAllocRequest{AllocId: "a1", Task: "web"}) || !proto.Equal(rs[1], &pb.RestartAllocRequest{AllocId: "a2"}) {
		t.Fatalf("restart requests = %v", rs)
	}

	gc, err := c.System().GC(ctx)
	if err != nil || gc.GetEvals() != 3 || gc.GetAllocs() != 2 || gc.GetJobs() != 1 {
		t.Fatalf("GC = %v, %v", gc, err)
	}
}

// TestLogsStreamAsPlainBytes reads a log that is not followed: the frames'
// bytes in order, and the request as the proxy got it.
func TestLogsStreamAsPlainBytes(t *testing.T) {
	f := newFakeServers(t)
	f.proxy.logFrames = []*pb.LogsFrame{{Data: []byte("hello ")}, {}, {Data: []byte("world\n")}}
	r := call(t, f.url, "GET", "/v1/client/fs/logs/a1?task=web&type=stderr&origin=end&offset=12", "")
	if r.status != 200 || string(r.body) != "hello world\n" || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("logs: %d %q %q", r.status, r.body, r.header.Get("Content-Type"))
	}
	want := &pb.LogsRequest{AllocId: "a1", Task: "web", Stderr: true, Origin: "end", Offset: 12}
	if got := f.state.requests("ClientProxy.Logs")[0]; !proto.Equal(got, want) {
		t.Fatalf("logs request = %v, want %v", got, want)
	}

	// An empty log is an empty 200.
	f.proxy.logFrames = nil
	if r := call(t, f.url, "GET", "/v1/client/fs/logs/a1", ""); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("empty log: %d %q", r.status, r.body)
	}
	// A refusal before the first frame is a JSON error with its status.
	f.state.failNext("ClientProxy.Logs", status.Error(codes.NotFound, `alloc a1 has no task "db"`))
	call(t, f.url, "GET", "/v1/client/fs/logs/a1?task=db", "").wantError(t, 404, "not_found", `no task "db"`)

	// A stream that breaks after it started is cut: the reader gets an
	// error, not a complete-looking log.
	f.proxy.logFrames = []*pb.LogsFrame{{Data: []byte("partial")}}
	f.proxy.breakAfter = status.Error(codes.Unavailable, "node n1 went away")
	c, _ := api.NewClient(f.url)
	rc, err := c.Allocations().Logs(context.Background(), "a1", api.LogsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if string(b) != "partial" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("broken stream read %q, %v; want \"partial\" and an unexpected EOF", b, err)
	}
}

// TestFollowedLogsArriveAsWrittenAndEndWithTheCaller follows a log: each
// frame reaches the caller before the next is sent (flushed, not
// buffered), and when the caller goes away the stream to the client ends.
func TestFollowedLogsArriveAsWrittenAndEndWithTheCaller(t *testing.T) {
	f := newFakeServers(t)
	f.proxy.logFrames = []*pb.LogsFrame{{}} // the proxy's "accepted" frame
	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := c.Allocations().Logs(ctx, "a1", api.LogsOptions{Follow: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	for _, line := range []string{"line one\n", "line two\n", "line three\n"} {
		f.proxy.follow <- &pb.LogsFrame{Data: []byte(line)}
		got, err := br.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("read %q, %v; want %q", got, err, line)
		}
	}
	if got := f.state.requests("ClientProxy.Logs")[0].(*pb.LogsRequest); !got.GetFollow() || !got.GetStderr() {
		t.Fatalf("logs request = %v", got)
	}
	cancel()
	if err := <-f.proxy.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the proxy stream ended with %v, want context.Canceled", err)
	}
}
