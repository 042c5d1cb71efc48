package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// step is one thing the fake cluster's servers do between two reads.
type step func(f *fakeCluster)

// fakeCluster is an agent's HTTP API over an in-memory state of jobs,
// allocs, evaluations and nodes, with pages and blocking queries. The test
// scripts what the servers do: each time a blocking read would wait, the
// next step runs and moves the index on. A blocking read with no step left
// fails, so a command that waits for something the test never does ends
// with an error instead of hanging.
type fakeCluster struct {
	t   *testing.T
	url string

	mu    sync.Mutex
	index uint64
	// waitTimesOut answers a blocking read with a wait time, once the
	// script is exhausted, as a server whose wait ran out does (the
	// current state) instead of failing it.
	waitTimesOut bool
	evalN        int
	jobs         map[string]*pb.Job
	allocs       map[string]*pb.Allocation
	evals        map[string]*pb.Evaluation
	nodes        map[string]*pb.Node
	// plugins is the CSI plugin table (plugin_test.go).
	plugins map[string]*pb.CSIPlugin
	// volumes and snapshots are the volume tables (volume_test.go);
	// snapshotTokens are the page tokens of the snapshot list.
	volumes        map[string]*pb.VolumeView
	snapshots      []*pb.Snapshot
	snapshotTokens []string
	script         []step
	// planResp answers plans; logs is every task's log.
	planResp *pb.JobPlanResponse
	logs     string
	// requests are "METHOD /path?query" in order; bodies the write bodies
	// by request.
	requests []string
	bodies   map[string][]byte
	// jobLimits are the limits the agent's server says it has (nil: the
	// agent runs no server).
	jobLimits *pb.JobLimits

	// expandResp, when set, answers volume expands (volume_expand_test.go).
	expandResp *pb.VolumeExpandResponse
	// hostVolumes are the dynamic host volumes (volume_host_test.go).
	hostVolumes map[string]*pb.HostVolume
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	f := &fakeCluster{t: t, index: 100,
		jobs: map[string]*pb.Job{}, allocs: map[string]*pb.Allocation{}, evals: map[string]*pb.Evaluation{}, nodes: map[string]*pb.Node{},
		plugins: map[string]*pb.CSIPlugin{}, volumes: map[string]*pb.VolumeView{}, bodies: map[string][]byte{},
		jobLimits: jobspec.Limits{}.Proto()}
	mux := http.NewServeMux()
	route := func(pattern string, h func(r *http.Request) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			defer f.mu.Unlock()
			req := r.Method + " " + r.URL.RequestURI()
			f.requests = append(f.requests, req)
			if len(body) > 0 {
				f.bodies[req] = body
			}
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			out, err := h(r)
			f.answer(w, out, err)
		})
	}
	route("GET /v1/jobs", func(r *http.Request) (any, error) {
		return f.read(r, func() any {
			var stubs []*pb.JobListStub
			for _, j := range f.jobs {
				if strings.HasPrefix(j.GetId(), r.URL.Query().Get("prefix")) {
					stubs = append(stubs, &pb.JobListStub{Id: j.GetId(), Name: j.GetName(), Type: j.GetType(), Priority: j.GetPriority(),
						Status: j.GetStatus(), Version: j.GetVersion(), SubmittedAt: j.GetSubmittedAt()})
				}
			}
			return stubs
		})
	})
	route("PUT /v1/jobs", func(r *http.Request) (any, error) {
		req := &pb.JobRegisterRequest{}
		if err := decodeReq(r, req); err != nil {
			return nil, err
		}
		job := req.GetJob()
		if old := f.jobs[job.GetId()]; old != nil {
			job.Version = old.GetVersion() + 1
		}
		f.index++
		job.JobModifyIndex = f.index
		f.jobs[job.GetId()] = job
		e := f.newEval(job.GetId(), pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER)
		return &pb.JobRegisterResponse{EvalId: e.GetId(), Version: job.GetVersion(), Meta: &pb.WriteMeta{Index: f.index}}, nil
	})
	route("GET /v1/job/{id}", func(r *http.Request) (any, error) {
		return f.readOne(r, "job", func() proto.Message { return f.jobs[r.PathValue("id")] })
	})
	route("GET /v1/job/{id}/summary", func(r *http.Request) (any, error) {
		return f.readOne(r, "job", func() proto.Message {
			if f.jobs[r.PathValue("id")] == nil {
				return nil
			}
			return f.summary(r.PathValue("id"))
		})
	})
	route("GET /v1/job/{id}/allocations", func(r *http.Request) (any, error) {
		return f.read(r, func() any {
			return filterMap(f.allocs, func(a *pb.Allocation) bool { return a.GetJobId() == r.PathValue("id") })
		})
	})
	route("GET /v1/job/{id}/evaluations", func(r *http.Request) (any, error) {
		return f.read(r, func() any {
			return filterMap(f.evals, func(e *pb.Evaluation) bool { return e.GetJobId() == r.PathValue("id") })
		})
	})
	route("GET /v1/job/{id}/versions", func(r *http.Request) (any, error) {
		job := f.jobs[r.PathValue("id")]
		if job == nil {
			return nil, notFound("job", r.PathValue("id"))
		}
		var vs []*pb.Job
		for v := int(job.GetVersion()); v >= 0; v-- {
			old := proto.Clone(job).(*pb.Job)
			old.Version = uint64(v)
			old.Groups[0].Count = int32(v + 1)
			vs = append(vs, old)
		}
		return vs, nil
	})
	route("DELETE /v1/job/{id}", func(r *http.Request) (any, error) {
		if f.jobs[r.PathValue("id")] == nil {
			return nil, notFound("job", r.PathValue("id"))
		}
		f.index++
		e := f.newEval(r.PathValue("id"), pb.EvalTrigger_EVAL_TRIGGER_JOB_DEREGISTER)
		return &pb.JobDeregisterResponse{EvalId: e.GetId(), Meta: &pb.WriteMeta{Index: f.index}}, nil
	})
	route("PUT /v1/job/{id}/plan", func(r *http.Request) (any, error) {
		if f.planResp == nil {
			return nil, &apiErr{500, "internal", "the planner broke"}
		}
		return f.planResp, nil
	})
	route("PUT /v1/job/{id}/revert", func(r *http.Request) (any, error) {
		f.index++
		e := f.newEval(r.PathValue("id"), pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER)
		return &pb.JobRegisterResponse{EvalId: e.GetId(), Meta: &pb.WriteMeta{Index: f.index}}, nil
	})
	route("GET /v1/allocations", func(r *http.Request) (any, error) {
		return f.read(r, func() any { return filterMap(f.allocs, func(*pb.Allocation) bool { return true }) })
	})
	route("GET /v1/allocation/{id}", func(r *http.Request) (any, error) {
		return f.readOne(r, "alloc", func() proto.Message { return f.allocs[r.PathValue("id")] })
	})
	route("PUT /v1/allocation/{id}/stop", func(r *http.Request) (any, error) {
		f.index++
		e := f.newEval(f.allocs[r.PathValue("id")].GetJobId(), pb.EvalTrigger_EVAL_TRIGGER_ALLOC_STOP)
		return &pb.AllocStopResponse{EvalId: e.GetId(), Meta: &pb.WriteMeta{Index: f.index}}, nil
	})
	route("PUT /v1/allocation/{id}/restart", func(*http.Request) (any, error) { return &pb.RestartAllocResponse{}, nil })
	route("GET /v1/client/fs/logs/{alloc}", func(*http.Request) (any, error) { return []byte(f.logs), nil })
	route("GET /v1/evaluations", func(r *http.Request) (any, error) {
		return f.read(r, func() any {
			return filterMap(f.evals, func(e *pb.Evaluation) bool {
				q := r.URL.Query()
				return (q.Get("job") == "" || e.GetJobId() == q.Get("job")) && (q.Get("status") == "" || pb.EnumWord(e.GetStatus()) == q.Get("status"))
			})
		})
	})
	route("GET /v1/evaluation/{id}", func(r *http.Request) (any, error) {
		return f.readOne(r, "eval", func() proto.Message { return f.evals[r.PathValue("id")] })
	})
	route("GET /v1/agent/self", func(r *http.Request) (any, error) {
		self := &pb.AgentSelf{Name: "a1"}
		if f.jobLimits != nil {
			self.Server = &pb.AgentServerInfo{Id: "s1", JobLimits: f.jobLimits}
		}
		return self, nil
	})
	route("GET /v1/nodes", func(r *http.Request) (any, error) {
		return f.read(r, func() any { return filterMap(f.nodes, func(*pb.Node) bool { return true }) })
	})
	route("GET /v1/node/{id}", func(r *http.Request) (any, error) {
		return f.readOne(r, "node", func() proto.Message { return f.nodes[r.PathValue("id")] })
	})
	nodeOp := func(r *http.Request) (any, error) {
		f.index++
		return &pb.NodeOpResponse{Meta: &pb.WriteMeta{Index: f.index}}, nil
	}
	route("PUT /v1/node/{id}/drain", nodeOp)
	route("PUT /v1/node/{id}/eligibility", nodeOp)
	// A fence of a ready node is refused, as the servers refuse it.
	route("PUT /v1/node/{id}/fence", func(r *http.Request) (any, error) {
		req := &pb.NodeFenceRequest{}
		if err := decodeReq(r, req); err != nil {
			return nil, err
		}
		if n := f.nodes[r.PathValue("id")]; req.GetFenced() && n.GetStatus() == pb.NodeStatus_NODE_STATUS_READY {
			return nil, &apiErr{409, "failed_precondition", fmt.Sprintf("node %s (%s) is ready: it still heartbeats, so it is not off", n.GetId(), n.GetName())}
		}
		return nodeOp(r)
	})
	route("GET /v1/plugins", func(r *http.Request) (any, error) {
		return f.read(r, func() any {
			return filterMap(f.plugins, func(p *pb.CSIPlugin) bool { return strings.HasPrefix(p.GetId(), r.URL.Query().Get("prefix")) })
		})
	})
	route("GET /v1/plugin/csi/{id}", func(r *http.Request) (any, error) {
		return f.readOne(r, "CSI plugin", func() proto.Message { return f.plugins[r.PathValue("id")] })
	})
	f.volumeRoutes(route)
	f.volumeDetachRoutes(route)
	f.hostVolumeRoutes(route)
	route("PUT /v1/system/gc", func(*http.Request) (any, error) { return &pb.GCResponse{Evals: 4, Allocs: 1, Jobs: 0}, nil })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

type apiErr struct {
	status     int
	code, text string
}

func (e *apiErr) Error() string { return e.text }

func notFound(kind, id string) error {
	return &apiErr{404, "not_found", fmt.Sprintf("%s %s: %s not found", kind, id, kind)}
}

func decodeReq(r *http.Request, m proto.Message) error {
	b, _ := io.ReadAll(r.Body)
	if err := apijson.Unmarshal(b, m); err != nil {
		return &apiErr{400, "invalid_argument", err.Error()}
	}
	return nil
}

// answer writes a message, a list page, raw bytes or an error.
func (f *fakeCluster) answer(w http.ResponseWriter, out any, err error) {
	if err != nil {
		ae, ok := err.(*apiErr)
		if !ok {
			ae = &apiErr{500, "internal", err.Error()}
		}
		w.WriteHeader(ae.status)
		fmt.Fprintf(w, `{"code": %q, "message": %q}`, ae.code, ae.text)
		return
	}
	w.Header().Set("X-Berth-Index", strconv.FormatUint(f.index, 10))
	var b []byte
	switch v := out.(type) {
	case []byte:
		b = v
	case proto.Message:
		b, err = apijson.Marshal(v)
	case page[*pb.JobListStub]:
		b, err = v.write(w)
	case page[*pb.Allocation]:
		b, err = v.write(w)
	case page[*pb.Evaluation]:
		b, err = v.write(w)
	case page[*pb.Node]:
		b, err = v.write(w)
	case page[*pb.CSIPlugin]:
		b, err = v.write(w)
	case page[*pb.VolumeView]:
		b, err = v.write(w)
	case page[*pb.Snapshot]:
		b, err = v.write(w)
	case []*pb.Job:
		b, err = apijson.MarshalList(v)
	default:
		err = fmt.Errorf("fake cluster cannot write %T", out)
	}
	if err != nil {
		f.t.Errorf("fake cluster: %v", err)
		w.WriteHeader(500)
		return
	}
	_, _ = w.Write(b)
}

type page[M proto.Message] struct {
	items []M
	next  string
}

func (p page[M]) write(w http.ResponseWriter) ([]byte, error) {
	if p.next != "" {
		w.Header().Set("X-Berth-NextToken", p.next)
	}
	return apijson.MarshalList(p.items)
}

type keyed interface {
	proto.Message
	GetId() string
}

func filterMap[M keyed](m map[string]M, keep func(M) bool) []M {
	var out []M
	for _, v := range m {
		if keep(v) {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b M) int { return strings.Compare(a.GetId(), b.GetId()) })
	return out
}

// wait runs script steps until the index passes the request's ?index=;
// false when the script is exhausted first.
func (f *fakeCluster) wait(r *http.Request) error {
	s := r.URL.Query().Get("index")
	if s == "" {
		return nil
	}
	min, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return &apiErr{400, "invalid_argument", "bad index"}
	}
	for f.index <= min {
		if len(f.script) == 0 && f.waitTimesOut && r.URL.Query().Get("wait") != "" {
			return nil
		}
		if len(f.script) == 0 {
			return &apiErr{500, "internal", fmt.Sprintf("test script exhausted: %s would wait forever", r.URL.RequestURI())}
		}
		next := f.script[0]
		f.script = f.script[1:]
		next(f)
		f.index++
	}
	return nil
}

// read answers a list read, paged from ?next_token= by ?per_page=.
func (f *fakeCluster) read(r *http.Request, list func() any) (any, error) {
	if err := f.wait(r); err != nil {
		return nil, err
	}
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	tok := r.URL.Query().Get("next_token")
	switch items := list().(type) {
	case []*pb.JobListStub:
		return pageFrom(items, per, tok), nil
	case []*pb.Allocation:
		return pageFrom(items, per, tok), nil
	case []*pb.Evaluation:
		return pageFrom(items, per, tok), nil
	case []*pb.Node:
		return pageFrom(items, per, tok), nil
	case []*pb.CSIPlugin:
		return pageFrom(items, per, tok), nil
	}
	return nil, fmt.Errorf("unknown list")
}

func pageFrom[M keyed](items []M, per int, tok string) page[M] {
	if per == 0 {
		per = 100
	}
	slices.SortFunc(items, func(a, b M) int { return strings.Compare(a.GetId(), b.GetId()) })
	i, _ := slices.BinarySearchFunc(items, tok, func(a M, t string) int { return strings.Compare(a.GetId(), t) })
	items = items[i:]
	if len(items) > per {
		return page[M]{items[:per], items[per].GetId()}
	}
	return page[M]{items: items}
}

func (f *fakeCluster) readOne(r *http.Request, kind string, get func() proto.Message) (any, error) {
	if err := f.wait(r); err != nil {
		return nil, err
	}
	m := get()
	if m == nil || !m.ProtoReflect().IsValid() {
		return nil, notFound(kind, r.PathValue("id"))
	}
	return m, nil
}

func (f *fakeCluster) summary(jobID string) *pb.JobSummary {
	s := &pb.JobSummary{Groups: map[string]*pb.GroupSummary{}}
	for _, g := range f.jobs[jobID].GetGroups() {
		s.Groups[g.GetName()] = &pb.GroupSummary{}
	}
	for _, a := range f.allocs {
		if a.GetJobId() != jobID {
			continue
		}
		g := s.Groups[a.GetTaskGroup()]
		switch a.GetClientStatus() {
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING:
			g.Running++
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING:
			g.Pending++
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED:
			g.Failed++
		}
	}
	return s
}

// newEval makes a pending evaluation e<N>e<N>... for a job.
func (f *fakeCluster) newEval(jobID string, trigger pb.EvalTrigger) *pb.Evaluation {
	f.evalN++
	id := fmt.Sprintf("e%07d-0000-4000-8000-000000000000", f.evalN)
	e := &pb.Evaluation{Id: id, JobId: jobID, TriggeredBy: trigger, Priority: 50, Type: pb.JobType_JOB_TYPE_SERVICE,
		Status: pb.EvalStatus_EVAL_STATUS_PENDING, CreateIndex: f.index, ModifyIndex: f.index}
	f.evals[id] = e
	return e
}

// Script steps.

func setEval(id string, st pb.EvalStatus, failed map[string]*pb.AllocMetric) step {
	return func(f *fakeCluster) {
		e := proto.Clone(f.evals[id]).(*pb.Evaluation)
		e.Status, e.FailedTgAllocs, e.ModifyIndex = st, failed, f.index+1
		f.evals[id] = e
	}
}

func place(evalID, jobID, group string, allocNode ...string) step {
	return func(f *fakeCluster) {
		for i := 0; i < len(allocNode); i += 2 {
			f.allocs[allocNode[i]] = &pb.Allocation{Id: allocNode[i], EvalId: evalID, JobId: jobID, TaskGroup: group,
				Name: fmt.Sprintf("%s.%s[%d]", jobID, group, i/2), NodeId: allocNode[i+1],
				DesiredStatus: pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN, ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING,
				CreateIndex: f.index + 1, ModifyIndex: f.index + 1}
		}
	}
}

func setAlloc(id string, st pb.AllocClientStatus, desc string, task string, ts *pb.TaskState) step {
	return func(f *fakeCluster) {
		a := proto.Clone(f.allocs[id]).(*pb.Allocation)
		a.ClientStatus, a.ClientDescription, a.ModifyIndex = st, desc, f.index+1
		if ts != nil {
			if a.TaskStates == nil {
				a.TaskStates = map[string]*pb.TaskState{}
			}
			a.TaskStates[task] = ts
		}
		f.allocs[id] = a
	}
}

func (f *fakeCluster) reqs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}

func (f *fakeCluster) body(req string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[req]
}

func testJob(id string) *pb.Job {
	return &pb.Job{Id: id, Name: id, Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "frontend", Count: 2, Tasks: []*pb.Task{{Name: "server", Driver: "raw_exec"}}}}}
}

// writeJobFile writes job as the API's JSON and makes the job commands
// parse their files that way for the test, so these tests do not depend
// on the job spec's syntax (host/jobspec has its own).
func writeJobFile(t *testing.T, job *pb.Job) string {
	t.Helper()
	b, err := apijson.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), job.GetId()+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	old := parseJobSpec
	parseJobSpec = func(filename string, src []byte, _ ...jobspec.Option) (*pb.Job, error) {
		j := &pb.Job{}
		if err := apijson.Unmarshal(src, j); err != nil {
			return nil, fmt.Errorf("%s: %w", filename, err)
		}
		return j, nil
	}
	t.Cleanup(func() { parseJobSpec = old })
	return path
}
