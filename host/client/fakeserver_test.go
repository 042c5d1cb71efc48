package client

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// fakeServer serves Nodes (Register, Heartbeat) and ClientAllocs on
// 127.0.0.1 the way the servers are to: Watch blocks until the node's
// alloc set or an alloc_modify_index moves past min_index (or max_wait
// passes), and sends allocs the client knows at their index as stubs.
type fakeServer struct {
	pb.UnimplementedNodesServer
	pb.UnimplementedClientAllocsServer
	addr string

	mu      sync.Mutex
	index   uint64
	allocs  map[string]*pb.Allocation
	jobs    map[string]*pb.Job
	changed chan struct{}
	watches []*pb.ClientAllocsRequest
	updates []timedUpdate
	// watchedAt is when each Watch answered, for latency figures.
	answeredAt map[string]time.Time
	// failUpdates makes that many Update calls fail (Unavailable),
	// refuseUpdates that many be refused (NotFound).
	failUpdates, refuseUpdates int
	// pageAllocs, when set, answers a paged watch with at most that many
	// allocs in full (by ID), the rest as stubs with more set, as the
	// servers do past their byte budget.
	pageAllocs int
	// jobsSent counts the jobs sent with watch answers, by key.
	jobsSent map[string]int
}

type timedUpdate struct {
	at time.Time
	u  *pb.AllocClientUpdate
}

func newFakeServer(t testing.TB) *fakeServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeServer{addr: lis.Addr().String(), index: 1, allocs: map[string]*pb.Allocation{}, jobs: map[string]*pb.Job{},
		changed: make(chan struct{}), answeredAt: map[string]time.Time{}}
	s := grpc.NewServer()
	pb.RegisterNodesServer(s, f)
	pb.RegisterClientAllocsServer(s, f)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return f
}

func (f *fakeServer) Register(context.Context, *pb.NodeRegisterRequest) (*pb.NodeRegisterResponse, error) {
	return &pb.NodeRegisterResponse{HeartbeatTtlMs: 10_000, Meta: &pb.WriteMeta{Index: 1}}, nil
}

func (f *fakeServer) Heartbeat(context.Context, *pb.NodeHeartbeatRequest) (*pb.NodeHeartbeatResponse, error) {
	return &pb.NodeHeartbeatResponse{HeartbeatTtlMs: 10_000}, nil
}

func (f *fakeServer) Watch(ctx context.Context, req *pb.ClientAllocsRequest) (*pb.ClientAllocsResponse, error) {
	f.mu.Lock()
	f.watches = append(f.watches, proto.Clone(req).(*pb.ClientAllocsRequest))
	f.mu.Unlock()
	timer := time.NewTimer(time.Duration(req.GetQuery().GetMaxWaitMs()) * time.Millisecond)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if f.index > req.GetQuery().GetMinIndex() {
			resp := f.answer(req)
			f.mu.Unlock()
			return resp, nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			f.mu.Lock()
			resp := f.answer(req)
			f.mu.Unlock()
			return resp, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// answer builds a Watch answer; f.mu is held.
func (f *fakeServer) answer(req *pb.ClientAllocsRequest) *pb.ClientAllocsResponse {
	resp := &pb.ClientAllocsResponse{Jobs: map[string]*pb.Job{}, Meta: &pb.QueryMeta{Index: f.index}}
	full := 0
	for _, id := range slices.Sorted(maps.Keys(f.allocs)) {
		a := f.allocs[id]
		if idx, ok := req.GetKnown()[id]; ok && idx == a.GetAllocModifyIndex() {
			resp.Allocs = append(resp.Allocs, &pb.Allocation{Id: id, AllocModifyIndex: idx})
			continue
		}
		if req.GetPaged() && f.pageAllocs > 0 && full == f.pageAllocs {
			resp.Allocs = append(resp.Allocs, &pb.Allocation{Id: id, AllocModifyIndex: a.GetAllocModifyIndex()})
			resp.More = true
			continue
		}
		full++
		resp.Allocs = append(resp.Allocs, proto.Clone(a).(*pb.Allocation))
		key := fmt.Sprintf("%s@%d", a.GetJobId(), a.GetJobVersion())
		if !slices.Contains(req.GetKnownJobs(), key) {
			resp.Jobs[key] = f.jobs[key]
			if f.jobsSent == nil {
				f.jobsSent = map[string]int{}
			}
			f.jobsSent[key]++
		}
		if _, ok := f.answeredAt[id]; !ok {
			f.answeredAt[id] = time.Now()
		}
	}
	return resp
}

func (f *fakeServer) Update(_ context.Context, req *pb.ClientAllocUpdateRequest) (*pb.ClientAllocUpdateResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUpdates > 0 {
		f.failUpdates--
		return nil, errUnavailable
	}
	if f.refuseUpdates > 0 {
		f.refuseUpdates--
		return nil, status.Error(codes.NotFound, "fake server: node not found")
	}
	now := time.Now()
	for _, u := range req.GetUpdates() {
		f.updates = append(f.updates, timedUpdate{now, u})
	}
	return &pb.ClientAllocUpdateResponse{Meta: &pb.WriteMeta{Index: f.index}}, nil
}

// bump moves the index and wakes the watches; f.mu is held.
func (f *fakeServer) bump() uint64 {
	f.index++
	close(f.changed)
	f.changed = make(chan struct{})
	return f.index
}

// place adds (or replaces) an alloc of job.
func (f *fakeServer) place(a *pb.Allocation, j *pb.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a = proto.Clone(a).(*pb.Allocation)
	a.AllocModifyIndex = f.bump()
	f.allocs[a.GetId()] = a
	f.jobs[fmt.Sprintf("%s@%d", j.GetId(), j.GetVersion())] = j
}

// stop sets an alloc's desired status to stop.
func (f *fakeServer) stop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := proto.Clone(f.allocs[id]).(*pb.Allocation)
	a.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	a.AllocModifyIndex = f.bump()
	f.allocs[id] = a
}

// remove forgets an alloc (as garbage collection does).
func (f *fakeServer) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.allocs, id)
	f.bump()
}

// lastUpdate is the last status the client reported for alloc id.
func (f *fakeServer) lastUpdate(id string) *pb.AllocClientUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastUpdateLocked(id)
}

// lastUpdateLocked is lastUpdate with f.mu held.
func (f *fakeServer) lastUpdateLocked(id string) *pb.AllocClientUpdate {
	for i := len(f.updates) - 1; i >= 0; i-- {
		if f.updates[i].u.GetAllocId() == id {
			return f.updates[i].u
		}
	}
	return nil
}

// firstStatusAt is when the client first reported alloc id with status st.
func (f *fakeServer) firstStatusAt(id string, st pb.AllocClientStatus) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, u := range f.updates {
		if u.u.GetAllocId() == id && u.u.GetClientStatus() == st {
			return u.at
		}
	}
	return time.Time{}
}

func (f *fakeServer) watchRequests() []*pb.ClientAllocsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*pb.ClientAllocsRequest(nil), f.watches...)
}
