package endpoints

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// jobsEndpoint registers, stops, reads and plans jobs.
type jobsEndpoint struct {
	pb.UnimplementedJobsServer
	s *api
}

func (e *jobsEndpoint) Register(ctx context.Context, req *pb.JobRegisterRequest) (*pb.JobRegisterResponse, error) {
	s := e.s
	job, _, warnings, err := s.admitJob(req.GetJob())
	if err != nil {
		return nil, err
	}
	now := s.Clock.Now().UnixNano()
	eval := evals.New(s.Clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER)
	cmd := &pb.JobRegisterCommand{
		Job:              job,
		Eval:             eval,
		EnforceIndex:     req.GetEnforceIndex(),
		IfJobModifyIndex: req.GetJobModifyIndex(),
		SubmittedAt:      now,
	}
	idx, err := s.Apply(ctx, fsm.JobRegister, cmd)
	if err != nil {
		return nil, fmt.Errorf("registering job %s: %w", job.GetId(), err)
	}
	resp := &pb.JobRegisterResponse{EvalId: eval.GetId(), Warnings: warnings, Meta: &pb.WriteMeta{Index: idx}}
	if stored, err := s.State().JobByID(nil, job.GetId()); err == nil && stored != nil {
		resp.Version, resp.JobModifyIndex = stored.GetVersion(), stored.GetJobModifyIndex()
	}
	return resp, nil
}

// admitJob is what Register and Plan do to a job from the API before
// using it: a copy with the defaults filled in, validated, and its tasks'
// configs checked against the drivers' schemas, with the state it was
// checked against and the warnings.
func (s *api) admitJob(in *pb.Job) (*pb.Job, *fsm.StateSnapshot, []string, error) {
	if in == nil {
		return nil, nil, nil, status.Error(codes.InvalidArgument, "job: missing")
	}
	// First, before a copy is made or a count is acted on.
	if err := jobspec.CheckLimits(in, s.JobLimits); err != nil {
		return nil, nil, nil, err
	}
	job := proto.Clone(in).(*pb.Job)
	jobspec.Canonicalize(job)
	// Again as it will be stored, with its defaults filled in: the job
	// the scheduler and a revert measure.
	if err := jobspec.CheckLimits(job, s.JobLimits); err != nil {
		return nil, nil, nil, err
	}
	if err := jobspec.ValidateJob(job); err != nil {
		return nil, nil, nil, err
	}
	snap := s.State().Snapshot()
	schemas, err := s.drivers.at(snap)
	if err != nil {
		return nil, nil, nil, err
	}
	warnings, err := checkDrivers(schemas, job)
	if err != nil {
		return nil, nil, nil, err
	}
	return job, snap, warnings, nil
}

// checkDrivers checks every task's driver and config against the task
// schemas the cluster's nodes reported (driverSchemas). A driver no node has is a warning,
// not an error: its nodes may not have joined yet, and the job waits
// blocked until they do (the CLI, which knows the built-in drivers too,
// refuses an unknown driver with the file position). A config the
// driver's schema refuses is an error naming group, task and key.
func checkDrivers(schemas map[string]*driverpb.Schema, job *pb.Job) (warnings []string, err error) {
	err = jobspec.ValidateDrivers(job, schemas)
	var all *jobspec.Errors
	if !errors.As(err, &all) {
		return nil, err
	}
	kept := &jobspec.Errors{}
	for _, e := range all.Errs {
		if errors.Is(e, jobspec.ErrUnknownDriver) {
			warnings = append(warnings, e.Error())
			continue
		}
		kept.Errs = append(kept.Errs, e)
	}
	if len(kept.Errs) > 0 {
		return warnings, fmt.Errorf("job %s: %w", job.GetId(), kept)
	}
	return warnings, nil
}

func (e *jobsEndpoint) Deregister(ctx context.Context, req *pb.JobDeregisterRequest) (*pb.JobDeregisterResponse, error) {
	s := e.s
	job, err := s.State().JobByID(nil, req.GetJobId())
	if err != nil {
		return nil, err
	}
	if job == nil {
		return nil, fmt.Errorf("job %s: %w", req.GetJobId(), fsm.ErrJobNotFound)
	}
	eval := evals.New(s.Clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_JOB_DEREGISTER)
	idx, err := s.Apply(ctx, fsm.JobDeregister, &pb.JobDeregisterCommand{
		JobId: job.GetId(), Purge: req.GetPurge(), Eval: eval, SubmittedAt: s.Clock.Now().UnixNano(),
	})
	if err != nil {
		return nil, fmt.Errorf("stopping job %s: %w", job.GetId(), err)
	}
	return &pb.JobDeregisterResponse{EvalId: eval.GetId(), Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (e *jobsEndpoint) Get(ctx context.Context, req *pb.JobGetRequest) (*pb.JobGetResponse, error) {
	resp := &pb.JobGetResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		job, err := st.JobByID(ws, req.GetJobId())
		if err != nil || job == nil {
			resp.Job = nil
			if err != nil {
				return 0, err
			}
			return st.Index(fsm.TableJobs)
		}
		allocs, err := st.AllocsByJob(ws, job.GetId())
		if err != nil {
			return 0, err
		}
		resp.Job, resp.Summary = job, summarize(job, allocs)
		idx := job.GetModifyIndex()
		for _, a := range allocs {
			idx = max(idx, a.GetModifyIndex())
		}
		return idx, nil
	})
	if err != nil {
		return nil, err
	}
	if resp.Job == nil {
		return nil, fmt.Errorf("job %s: %w", req.GetJobId(), fsm.ErrJobNotFound)
	}
	resp.Meta = meta
	return resp, nil
}

// summarize counts a job's allocs per group by client status; allocs the
// servers stopped that still run on their client count as running.
func summarize(job *pb.Job, allocs []*pb.Allocation) *pb.JobSummary {
	sum := &pb.JobSummary{Groups: map[string]*pb.GroupSummary{}}
	for _, g := range job.GetGroups() {
		sum.Groups[g.GetName()] = &pb.GroupSummary{}
	}
	for _, a := range allocs {
		g := sum.Groups[a.GetTaskGroup()]
		if g == nil {
			g = &pb.GroupSummary{}
			sum.Groups[a.GetTaskGroup()] = g
		}
		switch a.GetClientStatus() {
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING:
			g.Pending++
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING:
			g.Running++
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_COMPLETE:
			g.Complete++
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED:
			g.Failed++
		case pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST:
			g.Lost++
		}
	}
	return sum
}

func (e *jobsEndpoint) List(ctx context.Context, req *pb.JobListRequest) (*pb.JobListResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	prefix := req.GetPrefix()
	from := max(req.GetQuery().GetNextToken(), prefix)
	resp := &pb.JobListResponse{}
	var next string
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		jobs, nextID, err := st.JobsPage(ws, from, n, func(j *pb.Job) bool { return strings.HasPrefix(j.GetId(), prefix) })
		if err != nil {
			return 0, err
		}
		resp.Jobs = resp.Jobs[:0]
		for _, j := range jobs {
			allocs, err := st.AllocsByJob(nil, j.GetId())
			if err != nil {
				return 0, err
			}
			resp.Jobs = append(resp.Jobs, jobStub(j, summarize(j, allocs)))
		}
		if !strings.HasPrefix(nextID, prefix) {
			nextID = ""
		}
		next = nextID
		return st.Index(fsm.TableJobs)
	})
	if err != nil {
		return nil, err
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

func jobStub(j *pb.Job, sum *pb.JobSummary) *pb.JobListStub {
	return &pb.JobListStub{
		Id: j.GetId(), Name: j.GetName(), Type: j.GetType(), Priority: j.GetPriority(),
		Status: j.GetStatus(), Stop: j.GetStop(), Version: j.GetVersion(), SubmittedAt: j.GetSubmittedAt(),
		Summary: sum, CreateIndex: j.GetCreateIndex(), ModifyIndex: j.GetModifyIndex(), JobModifyIndex: j.GetJobModifyIndex(),
	}
}

// Versions answers one page of a job's versions, newest first. A page token
// encodes the version a page starts at as its distance from the largest
// version number, zero-padded, so tokens grow as pages go on, as every
// list's do (api.Pages relies on it).
func (e *jobsEndpoint) Versions(ctx context.Context, req *pb.JobVersionsRequest) (*pb.JobVersionsResponse, error) {
	n, err := PerPage(req.GetQuery())
	if err != nil {
		return nil, err
	}
	from := uint64(math.MaxUint64)
	if tok := req.GetQuery().GetNextToken(); tok != "" {
		if from, err = versionFromToken(tok); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "job %s: next_token %q: %v", req.GetJobId(), tok, err)
		}
	}
	resp := &pb.JobVersionsResponse{}
	var next string
	var found bool
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		versions, err := st.JobVersions(ws, req.GetJobId())
		if err != nil {
			return 0, err
		}
		found = len(versions) > 0
		resp.Versions, next = versionsPage(versions, from, n)
		return st.Index(fsm.TableJobVersions)
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("job %s: %w", req.GetJobId(), fsm.ErrJobNotFound)
	}
	meta.NextToken = next
	resp.Meta = meta
	return resp, nil
}

// versionToken is the page token of a page starting at version v.
func versionToken(v uint64) string { return fmt.Sprintf("%020d", math.MaxUint64-v) }

// versionFromToken reads a versionToken back.
func versionFromToken(tok string) (uint64, error) {
	if len(tok) != 20 {
		return 0, errors.New("not a job versions page token")
	}
	d, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return 0, errors.New("not a job versions page token")
	}
	return math.MaxUint64 - d, nil
}

// versionsPage is up to n of versions (newest first) starting at the first
// whose number is at most from; next is the token of the version after the
// page, "" when the page is the last.
func versionsPage(versions []*pb.Job, from uint64, n int) (page []*pb.Job, next string) {
	i := sort.Search(len(versions), func(i int) bool { return versions[i].GetVersion() <= from })
	versions = versions[i:]
	if len(versions) > n {
		return versions[:n], versionToken(versions[n].GetVersion())
	}
	return versions, ""
}

func (e *jobsEndpoint) Revert(ctx context.Context, req *pb.JobRevertRequest) (*pb.JobRegisterResponse, error) {
	s := e.s
	job, err := s.State().JobByID(nil, req.GetJobId())
	if err != nil {
		return nil, err
	}
	if job == nil {
		return nil, fmt.Errorf("job %s: %w", req.GetJobId(), fsm.ErrJobNotFound)
	}
	if req.GetVersion() == job.GetVersion() {
		return nil, status.Errorf(codes.InvalidArgument, "job %s: version %d is the current version; nothing to revert", job.GetId(), job.GetVersion())
	}
	// A version taken under other limits (raised since, or another
	// leader's) is held to today's, as a register of it would be.
	if old, err := s.State().JobVersion(nil, job.GetId(), req.GetVersion()); err == nil && old != nil {
		if err := jobspec.CheckLimits(old, s.JobLimits); err != nil {
			return nil, fmt.Errorf("reverting job %s to version %d: %w", job.GetId(), req.GetVersion(), err)
		}
	}
	eval := evals.New(s.Clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER)
	idx, err := s.Apply(ctx, fsm.JobRevert, &pb.JobRevertCommand{
		JobId: job.GetId(), Version: req.GetVersion(),
		EnforcePriorVersion: req.GetEnforcePriorVersion(), PriorVersion: req.GetPriorVersion(),
		Eval: eval, SubmittedAt: s.Clock.Now().UnixNano(),
	})
	if err != nil {
		return nil, fmt.Errorf("reverting job %s to version %d: %w", job.GetId(), req.GetVersion(), err)
	}
	resp := &pb.JobRegisterResponse{EvalId: eval.GetId(), Meta: &pb.WriteMeta{Index: idx}}
	if stored, err := s.State().JobByID(nil, job.GetId()); err == nil && stored != nil {
		resp.Version, resp.JobModifyIndex = stored.GetVersion(), stored.GetJobModifyIndex()
	}
	return resp, nil
}

// Plan runs the scheduler against the current state with the job as if it
// were registered, and reports what that would do; nothing is written.
func (e *jobsEndpoint) Plan(ctx context.Context, req *pb.JobPlanRequest) (*pb.JobPlanResponse, error) {
	s := e.s
	job, snap, warnings, err := s.admitJob(req.GetJob())
	if err != nil {
		return nil, err
	}
	resp, _, err := scheduler.PlanJob(evals.SchedulerState(snap), job, scheduler.Options{Now: s.Clock.Now().UnixNano(), NewID: newPlanID()})
	if err != nil {
		return nil, fmt.Errorf("planning job %s: %w", job.GetId(), err)
	}
	resp.Warnings = warnings
	resp.Meta = s.QueryMeta(evals.SchedulerState(snap).Index())
	return resp, nil
}

// newPlanID hands out IDs for a dry-run plan: they are never stored, so
// they need only be distinct within it.
func newPlanID() func() string {
	n := 0
	return func() string {
		n++
		return fmt.Sprintf("plan-%08d-0000-0000-0000-000000000000", n)
	}
}

// Allocations lists a job's allocs. An unknown job (jobKnown) is
// NotFound, not an empty list.
func (e *jobsEndpoint) Allocations(ctx context.Context, req *pb.JobAllocationsRequest) (*pb.AllocListResponse, error) {
	var known bool
	resp, err := allocList(ctx, e.s, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) ([]*pb.Allocation, error) {
		allocs, err := st.AllocsByJob(ws, req.GetJobId())
		if err != nil {
			return nil, err
		}
		known, err = jobKnown(ws, st, req.GetJobId(), len(allocs))
		return allocs, err
	})
	if err == nil && !known {
		err = fmt.Errorf("job %s: %w", req.GetJobId(), fsm.ErrJobNotFound)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Evaluations lists a job's evaluations; an unknown job (jobKnown) is
// NotFound.
func (e *jobsEndpoint) Evaluations(ctx context.Context, req *pb.JobEvaluationsRequest) (*pb.EvalListResponse, error) {
	var known bool
	resp, err := evalList(ctx, e.s, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) ([]*pb.Evaluation, error) {
		evals, err := st.EvalsByJob(ws, req.GetJobId())
		if err != nil {
			return nil, err
		}
		known, err = jobKnown(ws, st, req.GetJobId(), len(evals))
		return evals, err
	})
	if err == nil && !known {
		err = fmt.Errorf("job %s: %w", req.GetJobId(), fsm.ErrJobNotFound)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// jobKnown reports whether a job is registered, or has left something
// behind: n objects of the list being read, or any alloc or evaluation (a
// purged job's, until they are collected: the evaluation of its purge is
// read by the CLI's monitor).
func jobKnown(ws memdb.WatchSet, st *fsm.StateSnapshot, id string, n int) (bool, error) {
	if n > 0 {
		return true, nil
	}
	if job, err := st.JobByID(ws, id); err != nil || job != nil {
		return job != nil, err
	}
	if allocs, err := st.AllocsByJob(ws, id); err != nil || len(allocs) > 0 {
		return len(allocs) > 0, err
	}
	evals, err := st.EvalsByJob(ws, id)
	return len(evals) > 0, err
}
