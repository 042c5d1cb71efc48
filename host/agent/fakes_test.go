package agent

import (
	"context"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// fakeState is the state behind the fake job services: a few tables, a
// raft-like index and blocking reads that wake on change, so handler
// tests see real pagination and blocking without a cluster.
type fakeState struct {
	mu      sync.Mutex
	index   uint64
	changed chan struct{} // closed and replaced at every change
	// waiting receives one value each time a blocking read starts waiting,
	// so a test changes the state only once the read is blocked.
	waiting chan struct{}

	jobs   map[string]*pb.Job
	allocs map[string]*pb.Allocation
	evals  map[string]*pb.Evaluation

	// reqs records every request by method name ("Jobs.Register").
	reqs map[string][]proto.Message
	// errs makes a method fail once with the given error.
	errs map[string]error
}

func newFakeState() *fakeState {
	return &fakeState{
		index: 10, changed: make(chan struct{}), waiting: make(chan struct{}, 16),
		jobs: map[string]*pb.Job{}, allocs: map[string]*pb.Allocation{}, evals: map[string]*pb.Evaluation{},
		reqs: map[string][]proto.Message{}, errs: map[string]error{},
	}
}

// record notes a request and returns the error set for the method, if any.
func (s *fakeState) record(method string, req proto.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[method] = append(s.reqs[method], proto.Clone(req))
	err := s.errs[method]
	delete(s.errs, method)
	return err
}

func (s *fakeState) failNext(method string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[method] = err
}

func (s *fakeState) requests(method string) []proto.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs[method])
}

// update changes the state under the lock and moves the index on.
func (s *fakeState) update(fn func()) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
	s.index++
	close(s.changed)
	s.changed = make(chan struct{})
	return s.index
}

// read runs fn once the index passes q.min_index (or the wait ends) and
// returns the index it read at.
func (s *fakeState) read(ctx context.Context, q *pb.QueryOptions, fn func()) uint64 {
	wait := time.Duration(q.GetMaxWaitMs()) * time.Millisecond
	if wait == 0 {
		wait = time.Minute
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	signalled := false
	for {
		s.mu.Lock()
		if s.index > q.GetMinIndex() || q.GetMinIndex() == 0 {
			fn()
			idx := s.index
			s.mu.Unlock()
			return idx
		}
		ch := s.changed
		s.mu.Unlock()
		if !signalled {
			signalled = true
			s.waiting <- struct{}{}
		}
		select {
		case <-ch:
		case <-timer.C:
			q = &pb.QueryOptions{}
		case <-ctx.Done():
			q = &pb.QueryOptions{}
		}
	}
}

// pageOf pages items (sorted by key) as the servers do: from the first key
// at or after next_token, per_page items (default 100), and the next key.
func pageOf[T any](items []T, key func(T) string, q *pb.QueryOptions) ([]T, string, error) {
	per := int(q.GetPerPage())
	if per == 0 {
		per = 100
	}
	if per > 1000 {
		return nil, "", status.Errorf(codes.InvalidArgument, "per_page %d is more than 1000", per)
	}
	slices.SortFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	i, _ := slices.BinarySearchFunc(items, q.GetNextToken(), func(a T, tok string) int { return strings.Compare(key(a), tok) })
	items = items[i:]
	if len(items) > per {
		return items[:per], key(items[per]), nil
	}
	return items, "", nil
}

func mapValues[T any](m map[string]T, keep func(T) bool) []T {
	var out []T
	for _, v := range m {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

type fakeJobs struct {
	pb.UnimplementedJobsServer
	s *fakeState
	// planResp is what Plan answers.
	planResp *pb.JobPlanResponse
}

var _ pb.JobsServer = (*fakeJobs)(nil)

func (f *fakeJobs) Register(_ context.Context, req *pb.JobRegisterRequest) (*pb.JobRegisterResponse, error) {
	if err := f.s.record("Jobs.Register", req); err != nil {
		return nil, err
	}
	job := proto.Clone(req.GetJob()).(*pb.Job)
	evalID := "e-" + job.GetId()
	idx := f.s.update(func() {
		if old := f.s.jobs[job.GetId()]; old != nil {
			job.Version = old.GetVersion() + 1
		}
		job.JobModifyIndex = f.s.index + 1
		f.s.jobs[job.GetId()] = job
		f.s.evals[evalID] = &pb.Evaluation{Id: evalID, JobId: job.GetId(), Status: pb.EvalStatus_EVAL_STATUS_PENDING}
	})
	return &pb.JobRegisterResponse{EvalId: evalID, JobModifyIndex: idx, Version: job.GetVersion(), Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (f *fakeJobs) Deregister(_ context.Context, req *pb.JobDeregisterRequest) (*pb.JobDeregisterResponse, error) {
	if err := f.s.record("Jobs.Deregister", req); err != nil {
		return nil, err
	}
	idx := f.s.update(func() { delete(f.s.jobs, req.GetJobId()) })
	return &pb.JobDeregisterResponse{EvalId: "e-stop-" + req.GetJobId(), Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (f *fakeJobs) Get(ctx context.Context, req *pb.JobGetRequest) (*pb.JobGetResponse, error) {
	if err := f.s.record("Jobs.Get", req); err != nil {
		return nil, err
	}
	var job *pb.Job
	idx := f.s.read(ctx, req.GetQuery(), func() { job = f.s.jobs[req.GetJobId()] })
	if job == nil {
		return nil, status.Errorf(codes.NotFound, "job %s: job not found", req.GetJobId())
	}
	summary := &pb.JobSummary{Groups: map[string]*pb.GroupSummary{}}
	for _, g := range job.GetGroups() {
		summary.Groups[g.GetName()] = &pb.GroupSummary{Running: g.GetCount()}
	}
	return &pb.JobGetResponse{Job: job, Summary: summary, Meta: &pb.QueryMeta{Index: idx, KnownLeader: true}}, nil
}

func (f *fakeJobs) List(ctx context.Context, req *pb.JobListRequest) (*pb.JobListResponse, error) {
	if err := f.s.record("Jobs.List", req); err != nil {
		return nil, err
	}
	var page []*pb.JobListStub
	var next string
	var err error
	idx := f.s.read(ctx, req.GetQuery(), func() {
		var stubs []*pb.JobListStub
		for _, j := range mapValues(f.s.jobs, func(j *pb.Job) bool { return strings.HasPrefix(j.GetId(), req.GetPrefix()) }) {
			stubs = append(stubs, &pb.JobListStub{Id: j.GetId(), Name: j.GetName(), Type: j.GetType(), Version: j.GetVersion()})
		}
		page, next, err = pageOf(stubs, (*pb.JobListStub).GetId, req.GetQuery())
	})
	return &pb.JobListResponse{Jobs: page, Meta: &pb.QueryMeta{Index: idx, NextToken: next}}, err
}

func (f *fakeJobs) Versions(ctx context.Context, req *pb.JobVersionsRequest) (*pb.JobVersionsResponse, error) {
	if err := f.s.record("Jobs.Versions", req); err != nil {
		return nil, err
	}
	var job *pb.Job
	idx := f.s.read(ctx, req.GetQuery(), func() { job = f.s.jobs[req.GetJobId()] })
	if job == nil {
		return nil, status.Errorf(codes.NotFound, "job %s: job not found", req.GetJobId())
	}
	var versions []*pb.Job
	for v := int(job.GetVersion()); v >= 0; v-- {
		old := proto.Clone(job).(*pb.Job)
		old.Version = uint64(v)
		versions = append(versions, old)
	}
	return &pb.JobVersionsResponse{Versions: versions, Meta: &pb.QueryMeta{Index: idx}}, nil
}

func (f *fakeJobs) Revert(_ context.Context, req *pb.JobRevertRequest) (*pb.JobRegisterResponse, error) {
	if err := f.s.record("Jobs.Revert", req); err != nil {
		return nil, err
	}
	idx := f.s.update(func() {})
	return &pb.JobRegisterResponse{EvalId: "e-revert", Version: req.GetVersion() + 10, Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (f *fakeJobs) Plan(_ context.Context, req *pb.JobPlanRequest) (*pb.JobPlanResponse, error) {
	if err := f.s.record("Jobs.Plan", req); err != nil {
		return nil, err
	}
	return f.planResp, nil
}

func (f *fakeJobs) Allocations(ctx context.Context, req *pb.JobAllocationsRequest) (*pb.AllocListResponse, error) {
	if err := f.s.record("Jobs.Allocations", req); err != nil {
		return nil, err
	}
	return listAllocs(ctx, f.s, req.GetQuery(), func(a *pb.Allocation) bool { return a.GetJobId() == req.GetJobId() })
}

func (f *fakeJobs) Evaluations(ctx context.Context, req *pb.JobEvaluationsRequest) (*pb.EvalListResponse, error) {
	if err := f.s.record("Jobs.Evaluations", req); err != nil {
		return nil, err
	}
	return listEvals(ctx, f.s, req.GetQuery(), func(e *pb.Evaluation) bool { return e.GetJobId() == req.GetJobId() })
}

func listAllocs(ctx context.Context, s *fakeState, q *pb.QueryOptions, keep func(*pb.Allocation) bool) (*pb.AllocListResponse, error) {
	var page []*pb.Allocation
	var next string
	var err error
	idx := s.read(ctx, q, func() { page, next, err = pageOf(mapValues(s.allocs, keep), (*pb.Allocation).GetId, q) })
	return &pb.AllocListResponse{Allocs: page, Meta: &pb.QueryMeta{Index: idx, NextToken: next}}, err
}

func listEvals(ctx context.Context, s *fakeState, q *pb.QueryOptions, keep func(*pb.Evaluation) bool) (*pb.EvalListResponse, error) {
	var page []*pb.Evaluation
	var next string
	var err error
	idx := s.read(ctx, q, func() { page, next, err = pageOf(mapValues(s.evals, keep), (*pb.Evaluation).GetId, q) })
	return &pb.EvalListResponse{Evals: page, Meta: &pb.QueryMeta{Index: idx, NextToken: next}}, err
}

type fakeAllocs struct {
	pb.UnimplementedAllocsServer
	s *fakeState
}

var _ pb.AllocsServer = (*fakeAllocs)(nil)

func (f *fakeAllocs) Get(ctx context.Context, req *pb.AllocGetRequest) (*pb.AllocGetResponse, error) {
	if err := f.s.record("Allocs.Get", req); err != nil {
		return nil, err
	}
	var a *pb.Allocation
	idx := f.s.read(ctx, req.GetQuery(), func() { a = f.s.allocs[req.GetAllocId()] })
	if a == nil {
		return nil, status.Errorf(codes.NotFound, "alloc %s: alloc not found", req.GetAllocId())
	}
	return &pb.AllocGetResponse{Alloc: a, Meta: &pb.QueryMeta{Index: idx}}, nil
}

func (f *fakeAllocs) List(ctx context.Context, req *pb.AllocListRequest) (*pb.AllocListResponse, error) {
	if err := f.s.record("Allocs.List", req); err != nil {
		return nil, err
	}
	return listAllocs(ctx, f.s, req.GetQuery(), func(a *pb.Allocation) bool {
		return strings.HasPrefix(a.GetId(), req.GetPrefix()) &&
			(req.GetNodeId() == "" || a.GetNodeId() == req.GetNodeId()) &&
			(req.GetJobId() == "" || a.GetJobId() == req.GetJobId())
	})
}

func (f *fakeAllocs) Stop(_ context.Context, req *pb.AllocStopRequest) (*pb.AllocStopResponse, error) {
	if err := f.s.record("Allocs.Stop", req); err != nil {
		return nil, err
	}
	idx := f.s.update(func() {})
	return &pb.AllocStopResponse{EvalId: "e-stop-alloc", Meta: &pb.WriteMeta{Index: idx}}, nil
}

type fakeEvals struct {
	pb.UnimplementedEvalsServer
	s *fakeState
}

var _ pb.EvalsServer = (*fakeEvals)(nil)

func (f *fakeEvals) Get(ctx context.Context, req *pb.EvalGetRequest) (*pb.EvalGetResponse, error) {
	if err := f.s.record("Evals.Get", req); err != nil {
		return nil, err
	}
	var e *pb.Evaluation
	idx := f.s.read(ctx, req.GetQuery(), func() { e = f.s.evals[req.GetEvalId()] })
	if e == nil {
		return nil, status.Errorf(codes.NotFound, "eval %s: evaluation not found", req.GetEvalId())
	}
	return &pb.EvalGetResponse{Eval: e, Meta: &pb.QueryMeta{Index: idx}}, nil
}

func (f *fakeEvals) List(ctx context.Context, req *pb.EvalListRequest) (*pb.EvalListResponse, error) {
	if err := f.s.record("Evals.List", req); err != nil {
		return nil, err
	}
	return listEvals(ctx, f.s, req.GetQuery(), func(e *pb.Evaluation) bool {
		return strings.HasPrefix(e.GetId(), req.GetPrefix()) &&
			(req.GetJobId() == "" || e.GetJobId() == req.GetJobId()) &&
			(req.GetStatus() == 0 || e.GetStatus() == req.GetStatus())
	})
}

type fakeNodeOps struct {
	pb.UnimplementedNodeOpsServer
	s *fakeState
}

var _ pb.NodeOpsServer = (*fakeNodeOps)(nil)

func (f *fakeNodeOps) UpdateEligibility(_ context.Context, req *pb.NodeEligibilityRequest) (*pb.NodeOpResponse, error) {
	if err := f.s.record("NodeOps.UpdateEligibility", req); err != nil {
		return nil, err
	}
	return &pb.NodeOpResponse{EvalIds: []string{"e-elig"}, Meta: &pb.WriteMeta{Index: f.s.update(func() {})}}, nil
}

func (f *fakeNodeOps) UpdateDrain(_ context.Context, req *pb.NodeDrainRequest) (*pb.NodeOpResponse, error) {
	if err := f.s.record("NodeOps.UpdateDrain", req); err != nil {
		return nil, err
	}
	return &pb.NodeOpResponse{EvalIds: []string{"e-drain"}, Meta: &pb.WriteMeta{Index: f.s.update(func() {})}}, nil
}

func (f *fakeNodeOps) UpdateFence(_ context.Context, req *pb.NodeFenceRequest) (*pb.NodeOpResponse, error) {
	if err := f.s.record("NodeOps.UpdateFence", req); err != nil {
		return nil, err
	}
	return &pb.NodeOpResponse{Meta: &pb.WriteMeta{Index: f.s.update(func() {})}}, nil
}

func (f *fakeNodeOps) Allocations(ctx context.Context, req *pb.NodeAllocationsRequest) (*pb.AllocListResponse, error) {
	if err := f.s.record("NodeOps.Allocations", req); err != nil {
		return nil, err
	}
	return listAllocs(ctx, f.s, req.GetQuery(), func(a *pb.Allocation) bool { return a.GetNodeId() == req.GetNodeId() })
}

type fakeSystem struct {
	pb.UnimplementedSystemServer
	s *fakeState
}

var _ pb.SystemServer = (*fakeSystem)(nil)

func (f *fakeSystem) GarbageCollect(_ context.Context, req *pb.GCRequest) (*pb.GCResponse, error) {
	if err := f.s.record("System.GarbageCollect", req); err != nil {
		return nil, err
	}
	return &pb.GCResponse{Evals: 3, Allocs: 2, Jobs: 1, Meta: &pb.WriteMeta{Index: f.s.update(func() {})}}, nil
}

// fakeProxy serves ClientProxy: Logs sends the frames of logFrames for
// the request, then, when following, whatever the test sends on follow
// until the caller goes away.
type fakeProxy struct {
	pb.UnimplementedClientProxyServer
	s *fakeState

	mu        sync.Mutex
	logFrames []*pb.LogsFrame
	// follow feeds a followed stream; closing it ends the stream.
	follow chan *pb.LogsFrame
	// breakAfter, when set, fails the stream after the frames (a client
	// that went away mid-stream).
	breakAfter error
	// ended receives the stream's context error when a followed stream ends
	// because its caller went away.
	ended chan error
}

var _ pb.ClientProxyServer = (*fakeProxy)(nil)

func (f *fakeProxy) Logs(req *pb.LogsRequest, stream grpc.ServerStreamingServer[pb.LogsFrame]) error {
	if err := f.s.record("ClientProxy.Logs", req); err != nil {
		return err
	}
	f.mu.Lock()
	frames, brk := f.logFrames, f.breakAfter
	f.mu.Unlock()
	for _, fr := range frames {
		if err := stream.Send(fr); err != nil {
			return err
		}
	}
	if brk != nil {
		return brk
	}
	if !req.GetFollow() {
		return nil
	}
	for {
		select {
		case fr, ok := <-f.follow:
			if !ok {
				return nil
			}
			if err := stream.Send(fr); err != nil {
				return err
			}
		case <-stream.Context().Done():
			f.ended <- stream.Context().Err()
			return stream.Context().Err()
		}
	}
}

func (f *fakeProxy) RestartAlloc(_ context.Context, req *pb.RestartAllocRequest) (*pb.RestartAllocResponse, error) {
	if err := f.s.record("ClientProxy.RestartAlloc", req); err != nil {
		return nil, err
	}
	return &pb.RestartAllocResponse{}, nil
}

// fakeServers is an agent whose HTTP API calls fake gRPC services on
// 127.0.0.1 instead of a real server.
type fakeServers struct {
	state *fakeState
	jobs  *fakeJobs
	proxy *fakeProxy
	// plugins is the CSI plugin table (http_csi_test.go).
	plugins *fakeCSIPlugins
	// volumes is the volume table (http_volumes_test.go).
	volumes *fakeVolumes
	url     string
}

func newFakeServers(t *testing.T) *fakeServers {
	t.Helper()
	st := newFakeState()
	f := &fakeServers{
		state: st,
		jobs:  &fakeJobs{s: st},
		proxy: &fakeProxy{s: st, follow: make(chan *pb.LogsFrame), ended: make(chan error, 1)},
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(rpc.ServerOptions()...)
	pb.RegisterJobsServer(gs, f.jobs)
	pb.RegisterAllocsServer(gs, &fakeAllocs{s: st})
	pb.RegisterEvalsServer(gs, &fakeEvals{s: st})
	pb.RegisterNodeOpsServer(gs, &fakeNodeOps{s: st})
	pb.RegisterSystemServer(gs, &fakeSystem{s: st})
	pb.RegisterClientProxyServer(gs, f.proxy)
	f.plugins = &fakeCSIPlugins{s: st, plugins: map[string]*pb.CSIPlugin{}}
	pb.RegisterCSIPluginsServer(gs, f.plugins)
	f.volumes = newFakeVolumes(st)
	pb.RegisterVolumesServer(gs, f.volumes)
	pb.RegisterHostVolumesServer(gs, &fakeHostVolumes{s: st})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	a := &Agent{pool: rpc.NewPool(), rpcAddrs: []string{lis.Addr().String()}, logger: testutil.Logger(t)}
	t.Cleanup(a.pool.Close)
	srv := httptest.NewServer(a.routes())
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}
