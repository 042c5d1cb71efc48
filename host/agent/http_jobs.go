package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// jobList is GET /v1/jobs: one page of job stubs in ID order, optionally
// only the IDs starting with ?prefix=; a blocking query.
func (a *Agent) jobList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.JobListRequest{Query: q, Prefix: r.URL.Query().Get("prefix")}
	var resp *pb.JobListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).List(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetJobs())
}

// jobRegister is PUT /v1/jobs with a JobRegisterRequest body:
// {"job": {...}, "enforce_index": false, "job_modify_index": 0}.
func (a *Agent) jobRegister(w http.ResponseWriter, r *http.Request) error {
	req := &pb.JobRegisterRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	if req.GetJob() == nil {
		return badRequest("request body: job is required")
	}
	if req.GetJob().GetId() == "" {
		return badRequest("request body: job.id is required")
	}
	if !req.GetEnforceIndex() && req.GetJobModifyIndex() != 0 {
		// A check the caller asked for by half would silently not happen.
		return badRequest("request body: job_modify_index is set but enforce_index is false")
	}
	var resp *pb.JobRegisterResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Register(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// jobGet is GET /v1/job/{id}: the job's latest version.
func (a *Agent) jobGet(w http.ResponseWriter, r *http.Request) error {
	resp, err := a.getJob(r)
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetJob())
}

// jobSummary is GET /v1/job/{id}/summary: the job's allocs per group and
// client status.
func (a *Agent) jobSummary(w http.ResponseWriter, r *http.Request) error {
	resp, err := a.getJob(r)
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	summary := resp.GetSummary()
	if summary == nil {
		summary = &pb.JobSummary{}
	}
	return writeProto(w, summary)
}

func (a *Agent) getJob(r *http.Request) (*pb.JobGetResponse, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	req := &pb.JobGetRequest{JobId: r.PathValue("id"), Query: q}
	var resp *pb.JobGetResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Get(ctx, req)
		return err
	})
	return resp, err
}

// jobDeregister is DELETE /v1/job/{id}: the job is stopped, and with
// ?purge=true removed with its history.
func (a *Agent) jobDeregister(w http.ResponseWriter, r *http.Request) error {
	purge, err := queryBool(r, "purge")
	if err != nil {
		return err
	}
	req := &pb.JobDeregisterRequest{JobId: r.PathValue("id"), Purge: purge}
	var resp *pb.JobDeregisterResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Deregister(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// jobAllocations is GET /v1/job/{id}/allocations: one page of the job's
// allocs in ID order; a blocking query.
func (a *Agent) jobAllocations(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.JobAllocationsRequest{JobId: r.PathValue("id"), Query: q}
	var resp *pb.AllocListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Allocations(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetAllocs())
}

// jobEvaluations is GET /v1/job/{id}/evaluations: one page of the job's
// evaluations in ID order; a blocking query.
func (a *Agent) jobEvaluations(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.JobEvaluationsRequest{JobId: r.PathValue("id"), Query: q}
	var resp *pb.EvalListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Evaluations(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetEvals())
}

// jobVersions is GET /v1/job/{id}/versions: one page of the job's versions,
// newest first.
func (a *Agent) jobVersions(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.JobVersionsRequest{JobId: r.PathValue("id"), Query: q}
	var resp *pb.JobVersionsResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Versions(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetVersions())
}

// jobPlan is PUT /v1/job/{id}/plan with a JobPlanRequest body ({"job":
// {...}}): what registering the job would change, without changing it.
func (a *Agent) jobPlan(w http.ResponseWriter, r *http.Request) error {
	req := &pb.JobPlanRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	if req.GetJob() == nil {
		return badRequest("request body: job is required")
	}
	id := r.PathValue("id")
	if req.GetJob().GetId() != id {
		return badRequest("request body: job.id %q differs from %q in the path", req.GetJob().GetId(), id)
	}
	var resp *pb.JobPlanResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Plan(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// jobRevert is PUT /v1/job/{id}/revert with a JobRevertRequest body:
// {"version": 2} registers version 2's specification again as a new
// version; "enforce_prior_version" with "prior_version" makes it
// conditional on the current version.
func (a *Agent) jobRevert(w http.ResponseWriter, r *http.Request) error {
	req := &pb.JobRevertRequest{}
	if err := decodeBody(w, r, req, false); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := samePathID("job_id", req.GetJobId(), id); err != nil {
		return err
	}
	req.JobId = id
	if !req.GetEnforcePriorVersion() && req.GetPriorVersion() != 0 {
		return badRequest("request body: prior_version is set but enforce_prior_version is false")
	}
	var resp *pb.JobRegisterResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewJobsClient(c).Revert(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}
