package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// Jobs is the job part of the API: c.Jobs().List(ctx, q), ...
type Jobs struct{ c *Client }

// Jobs returns the job endpoints.
func (c *Client) Jobs() *Jobs { return &Jobs{c} }

// RegisterOptions make a register conditional.
type RegisterOptions struct {
	// EnforceIndex registers only if the job's job_modify_index is
	// ModifyIndex (0: only if the job does not exist), as `job run
	// -check-index` does; otherwise the agent answers failed_precondition.
	EnforceIndex bool
	ModifyIndex  uint64
}

// Register stores a new version of job and returns the evaluation it made.
func (j *Jobs) Register(ctx context.Context, job *pb.Job, opts *RegisterOptions) (*pb.JobRegisterResponse, error) {
	if job == nil {
		return nil, fmt.Errorf("api: Register needs a job")
	}
	req := &pb.JobRegisterRequest{Job: job}
	if opts != nil {
		req.EnforceIndex, req.JobModifyIndex = opts.EnforceIndex, opts.ModifyIndex
	}
	out := &pb.JobRegisterResponse{}
	return out, j.c.write(ctx, http.MethodPut, "/v1/jobs", nil, req, out)
}

// List returns one page of job stubs in ID order; q.Params may hold
// {"prefix": "web"}. AllPages(ctx, q, c.Jobs().List) reads them all.
func (j *Jobs) List(ctx context.Context, q *QueryOptions) ([]*pb.JobListStub, *QueryMeta, error) {
	return getList(ctx, j.c, "/v1/jobs", q, func() *pb.JobListStub { return &pb.JobListStub{} })
}

// Info returns the latest version of a job by its exact ID.
func (j *Jobs) Info(ctx context.Context, id string, q *QueryOptions) (*pb.Job, *QueryMeta, error) {
	out := &pb.Job{}
	meta, err := j.c.getJSON(ctx, jobPath(id, ""), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Summary counts a job's allocs per group and client status.
func (j *Jobs) Summary(ctx context.Context, id string, q *QueryOptions) (*pb.JobSummary, *QueryMeta, error) {
	out := &pb.JobSummary{}
	meta, err := j.c.getJSON(ctx, jobPath(id, "/summary"), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Deregister stops a job; purge also removes it and its history.
func (j *Jobs) Deregister(ctx context.Context, id string, purge bool) (*pb.JobDeregisterResponse, error) {
	var q url.Values
	if purge {
		q = url.Values{"purge": {"true"}}
	}
	out := &pb.JobDeregisterResponse{}
	return out, j.c.write(ctx, http.MethodDelete, jobPath(id, ""), q, nil, out)
}

// Versions returns one page of a job's versions, newest first.
func (j *Jobs) Versions(ctx context.Context, id string, q *QueryOptions) ([]*pb.Job, *QueryMeta, error) {
	return getList(ctx, j.c, jobPath(id, "/versions"), q, func() *pb.Job { return &pb.Job{} })
}

// Revert registers version's specification again as the job's newest
// version. A non-nil priorVersion makes it conditional on the job's
// current version.
func (j *Jobs) Revert(ctx context.Context, id string, version uint64, priorVersion *uint64) (*pb.JobRegisterResponse, error) {
	req := &pb.JobRevertRequest{Version: version}
	if priorVersion != nil {
		req.EnforcePriorVersion, req.PriorVersion = true, *priorVersion
	}
	out := &pb.JobRegisterResponse{}
	return out, j.c.write(ctx, http.MethodPut, jobPath(id, "/revert"), nil, req, out)
}

// Plan says what registering job would change, changing nothing.
func (j *Jobs) Plan(ctx context.Context, job *pb.Job) (*pb.JobPlanResponse, error) {
	if job == nil {
		return nil, fmt.Errorf("api: Plan needs a job")
	}
	out := &pb.JobPlanResponse{}
	return out, j.c.write(ctx, http.MethodPut, jobPath(job.GetId(), "/plan"), nil, &pb.JobPlanRequest{Job: job}, out)
}

// Allocations returns one page of a job's allocs in ID order.
func (j *Jobs) Allocations(ctx context.Context, id string, q *QueryOptions) ([]*pb.Allocation, *QueryMeta, error) {
	return getList(ctx, j.c, jobPath(id, "/allocations"), q, newAlloc)
}

// Evaluations returns one page of a job's evaluations in ID order.
func (j *Jobs) Evaluations(ctx context.Context, id string, q *QueryOptions) ([]*pb.Evaluation, *QueryMeta, error) {
	return getList(ctx, j.c, jobPath(id, "/evaluations"), q, newEval)
}

func jobPath(id, rest string) string { return "/v1/job/" + url.PathEscape(id) + rest }

func newAlloc() *pb.Allocation { return &pb.Allocation{} }
func newEval() *pb.Evaluation  { return &pb.Evaluation{} }
