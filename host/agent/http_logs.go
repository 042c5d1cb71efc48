package agent

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

// allocLogs is GET /v1/client/fs/logs/{alloc}: a task's log as plain bytes,
// streamed (chunked) as the alloc's client sends it through a server
// (ClientProxy.Logs). Parameters: task (default: the server picks the
// alloc's only or leader task), type=stdout|stderr, follow=true (keep
// sending what the task writes until the client disconnects), origin=start|end
// and offset (bytes from origin).
//
// Nothing is written before the stream's first frame, which servers send as
// soon as the client accepted the call, so an unknown alloc or task is still
// a JSON error with its status. A stream that breaks later aborts the
// connection, so the caller sees a truncated body rather than a log that
// looks complete.
func (a *Agent) allocLogs(w http.ResponseWriter, r *http.Request) error {
	req, err := logsRequest(r)
	if err != nil {
		return err
	}
	return a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) error {
		stream, err := pb.NewClientProxyClient(c).Logs(ctx, req)
		if err != nil {
			return err
		}
		first, err := stream.Recv()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		// Logs are whatever the task wrote: never let a browser guess HTML.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if err != nil { // io.EOF: an empty log, not followed
			return nil
		}
		rc := http.NewResponseController(w)
		for frame := first; ; {
			if len(frame.GetData()) > 0 {
				if _, err := w.Write(frame.GetData()); err != nil {
					return nil // the caller went away
				}
			}
			// Flushed per frame: a followed log must reach the caller as the
			// task writes it, not when a buffer fills.
			if err := rc.Flush(); err != nil {
				return nil
			}
			frame, err = stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				if r.Context().Err() != nil {
					return nil // the caller disconnected: that ends a follow
				}
				panic(http.ErrAbortHandler)
			}
		}
	})
}

func logsRequest(r *http.Request) (*pb.LogsRequest, error) {
	v := r.URL.Query()
	req := &pb.LogsRequest{AllocId: r.PathValue("alloc"), Task: v.Get("task"), Origin: "start"}
	switch t := v.Get("type"); t {
	case "", "stdout":
	case "stderr":
		req.Stderr = true
	default:
		return nil, badRequest("query parameter type=%q: must be stdout or stderr", t)
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		return nil, err
	}
	req.Follow = follow
	switch o := v.Get("origin"); o {
	case "", "start":
	case "end":
		req.Origin = "end"
	default:
		return nil, badRequest("query parameter origin=%q: must be start or end", o)
	}
	if s := v.Get("offset"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, badRequest("query parameter offset=%q: not a non-negative number of bytes", s)
		}
		req.Offset = n
	}
	return req, nil
}
