package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// allocList is GET /v1/allocations: one page of allocs in ID order,
// filtered by ?prefix=, ?node_id= and ?job_id=; a blocking query.
func (a *Agent) allocList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	v := r.URL.Query()
	req := &pb.AllocListRequest{Query: q, Prefix: v.Get("prefix"), NodeId: v.Get("node_id"), JobId: v.Get("job_id")}
	var resp *pb.AllocListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewAllocsClient(c).List(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetAllocs())
}

// allocGet is GET /v1/allocation/{id}; a blocking query.
func (a *Agent) allocGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.AllocGetRequest{AllocId: r.PathValue("id"), Query: q}
	var resp *pb.AllocGetResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewAllocsClient(c).Get(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetAlloc())
}

// allocStop is PUT /v1/allocation/{id}/stop: the alloc is stopped and
// replaced, unless ?no_replace=true.
func (a *Agent) allocStop(w http.ResponseWriter, r *http.Request) error {
	noReplace, err := queryBool(r, "no_replace")
	if err != nil {
		return err
	}
	req := &pb.AllocStopRequest{AllocId: r.PathValue("id"), NoReplace: noReplace}
	var resp *pb.AllocStopResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewAllocsClient(c).Stop(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// allocRestart is PUT /v1/allocation/{id}/restart, with an optional body
// {"task": "web"} restricting it to one task; the server forwards it to
// the alloc's client.
func (a *Agent) allocRestart(w http.ResponseWriter, r *http.Request) error {
	req := &pb.RestartAllocRequest{}
	if err := decodeBody(w, r, req, true); err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := samePathID("alloc_id", req.GetAllocId(), id); err != nil {
		return err
	}
	req.AllocId = id
	var resp *pb.RestartAllocResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewClientProxyClient(c).RestartAlloc(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	return writeProto(w, resp)
}

// evalList is GET /v1/evaluations: one page of evaluations in ID order,
// filtered by ?job=, ?status= and ?prefix=; a blocking query.
func (a *Agent) evalList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	st, err := queryEnum(r, "status", pb.EvalStatus(0).Descriptor())
	if err != nil {
		return err
	}
	v := r.URL.Query()
	req := &pb.EvalListRequest{Query: q, Prefix: v.Get("prefix"), JobId: v.Get("job"), Status: pb.EvalStatus(st)}
	var resp *pb.EvalListResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewEvalsClient(c).List(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetEvals())
}

// evalGet is GET /v1/evaluation/{id}; a blocking query.
func (a *Agent) evalGet(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	req := &pb.EvalGetRequest{EvalId: r.PathValue("id"), Query: q}
	var resp *pb.EvalGetResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewEvalsClient(c).Get(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp.GetEval())
}

// systemGC is PUT /v1/system/gc: collect old evaluations, terminal allocs
// and purged jobs now.
func (a *Agent) systemGC(w http.ResponseWriter, r *http.Request) error {
	var resp *pb.GCResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewSystemClient(c).GarbageCollect(ctx, &pb.GCRequest{})
		return err
	})
	if err != nil {
		return err
	}
	setWriteHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}
