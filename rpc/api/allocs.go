package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"berth.dev/berth/rpc/pb"
)

// Allocations is the allocation part of the API.
type Allocations struct{ c *Client }

// Allocations returns the allocation endpoints.
func (c *Client) Allocations() *Allocations { return &Allocations{c} }

// List returns one page of allocs in ID order; q.Params may filter
// ({"prefix": ..., "node_id": ..., "job_id": ...}).
func (a *Allocations) List(ctx context.Context, q *QueryOptions) ([]*pb.Allocation, *QueryMeta, error) {
	return getList(ctx, a.c, "/v1/allocations", q, newAlloc)
}

// Info returns an alloc by its full ID.
func (a *Allocations) Info(ctx context.Context, id string, q *QueryOptions) (*pb.Allocation, *QueryMeta, error) {
	out := &pb.Allocation{}
	meta, err := a.c.getJSON(ctx, allocPath(id, ""), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// Stop stops an alloc; the scheduler replaces it unless noReplace.
func (a *Allocations) Stop(ctx context.Context, id string, noReplace bool) (*pb.AllocStopResponse, error) {
	var q url.Values
	if noReplace {
		q = url.Values{"no_replace": {"true"}}
	}
	out := &pb.AllocStopResponse{}
	return out, a.c.write(ctx, http.MethodPut, allocPath(id, "/stop"), q, nil, out)
}

// Restart restarts an alloc's running tasks in place, or only task.
func (a *Allocations) Restart(ctx context.Context, id, task string) error {
	return a.c.write(ctx, http.MethodPut, allocPath(id, "/restart"), nil, &pb.RestartAllocRequest{Task: task}, &pb.RestartAllocResponse{})
}

// LogsOptions choose which log Logs reads and from where.
type LogsOptions struct {
	// Task defaults to the alloc's only (or leader) task.
	Task string
	// Stderr reads stderr instead of stdout.
	Stderr bool
	// Follow keeps the stream open for what the task writes next.
	Follow bool
	// FromEnd counts Offset back from the end of the log, not from its start.
	FromEnd bool
	Offset  int64
}

// Logs streams a task's log. The caller reads and closes the stream;
// cancelling ctx (or closing the stream) ends a followed log. A stream the
// agent cut short reads as an error, not as io.EOF.
func (a *Allocations) Logs(ctx context.Context, id string, opts LogsOptions) (io.ReadCloser, error) {
	if opts.Offset < 0 {
		return nil, fmt.Errorf("api: Logs offset %d is negative", opts.Offset)
	}
	q := url.Values{}
	if opts.Task != "" {
		q.Set("task", opts.Task)
	}
	if opts.Stderr {
		q.Set("type", "stderr")
	}
	if opts.Follow {
		q.Set("follow", "true")
	}
	if opts.FromEnd {
		q.Set("origin", "end")
	}
	if opts.Offset > 0 {
		q.Set("offset", strconv.FormatInt(opts.Offset, 10))
	}
	resp, err := a.c.do(ctx, http.MethodGet, "/v1/client/fs/logs/"+url.PathEscape(id), q, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

func allocPath(id, rest string) string { return "/v1/allocation/" + url.PathEscape(id) + rest }

// Evaluations is the evaluation part of the API.
type Evaluations struct{ c *Client }

// Evaluations returns the evaluation endpoints.
func (c *Client) Evaluations() *Evaluations { return &Evaluations{c} }

// List returns one page of evaluations in ID order; q.Params may filter
// ({"job": ..., "status": "blocked", "prefix": ...}).
func (e *Evaluations) List(ctx context.Context, q *QueryOptions) ([]*pb.Evaluation, *QueryMeta, error) {
	return getList(ctx, e.c, "/v1/evaluations", q, newEval)
}

// Info returns an evaluation by its full ID.
func (e *Evaluations) Info(ctx context.Context, id string, q *QueryOptions) (*pb.Evaluation, *QueryMeta, error) {
	out := &pb.Evaluation{}
	meta, err := e.c.getJSON(ctx, "/v1/evaluation/"+url.PathEscape(id), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}
