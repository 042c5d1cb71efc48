package agent

import (
	"context"
	"errors"
	"io"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
)

func (a *Agent) raftConfiguration(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.RaftConfigurationResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewOperatorClient(c).RaftConfiguration(ctx, &pb.RaftConfigurationRequest{Query: q})
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProto(w, resp)
}

// raftRemovePeer is force-leave: DELETE /v1/operator/raft/peer with ?peer=
// (an ID, name or RPC address) or one of ?id=, ?name=, ?address=.
func (a *Agent) raftRemovePeer(w http.ResponseWriter, r *http.Request) error {
	v := r.URL.Query()
	req := &pb.RemovePeerRequest{Id: v.Get("id"), Name: v.Get("name"), RpcAddr: v.Get("address")}
	if p := v.Get("peer"); p != "" {
		req = &pb.RemovePeerRequest{Id: p, Name: p, RpcAddr: p}
	}
	if req.Id == "" && req.Name == "" && req.RpcAddr == "" {
		return badRequest("one of the query parameters peer, id, name or address is required")
	}
	var resp *pb.RemovePeerResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewOperatorClient(c).RemovePeer(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	return writeProto(w, resp)
}

// snapshotSave streams a snapshot archive as application/octet-stream.
func (a *Agent) snapshotSave(w http.ResponseWriter, r *http.Request) error {
	return a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) error {
		stream, err := pb.NewOperatorClient(c).SnapshotSave(ctx, &pb.SnapshotSaveRequest{})
		if err != nil {
			return err
		}
		// Nothing is written until the first chunk arrives, so an error
		// before it still becomes a JSON error reply.
		first, err := stream.Recv()
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if _, err := w.Write(first.GetData()); err != nil {
			return nil
		}
		for {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				// Headers are sent: abort the connection so the client sees a
				// truncated body rather than a complete-looking file.
				panic(http.ErrAbortHandler)
			}
			if _, err := w.Write(chunk.GetData()); err != nil {
				return nil
			}
		}
	})
}

// snapshotRestore replaces the cluster state with the uploaded archive.
func (a *Agent) snapshotRestore(w http.ResponseWriter, r *http.Request) error {
	var resp *pb.SnapshotRestoreResponse
	var firstErr error
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		if firstErr != nil {
			// The body was consumed by the first attempt and cannot be
			// replayed: answer with that attempt's error.
			return firstErr
		}
		stream, err := pb.NewOperatorClient(c).SnapshotRestore(ctx)
		if err != nil {
			return err
		}
		defer func() { firstErr = err }()
		buf := make([]byte, 256<<10)
		for {
			n, rerr := r.Body.Read(buf)
			if n > 0 {
				if err := stream.Send(&pb.SnapshotChunk{Data: append([]byte(nil), buf[:n]...)}); err != nil {
					break
				}
			}
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				return badRequest("reading snapshot body: %v", rerr)
			}
		}
		resp, err = stream.CloseAndRecv()
		return err
	})
	if err != nil {
		return err
	}
	return writeProto(w, resp)
}
