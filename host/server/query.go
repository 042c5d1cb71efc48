package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/durations"
	"berth.dev/berth/rpc/pb"
)

const (
	// defaultQueryWait is how long a blocking query waits when it names an
	// index but no wait; maxQueryWait caps any requested wait.
	defaultQueryWait = 5 * time.Minute
	maxQueryWait     = 10 * time.Minute
)

// blockingRead runs fn against the local state, re-running it until the
// index it returns passes q.MinIndex or the query's wait ends; consistent
// queries first confirm leadership. It returns the meta to send back.
func (s *Server) blockingRead(ctx context.Context, q *pb.QueryOptions, fn fsm.QueryFunc) (*pb.QueryMeta, error) {
	if q.GetConsistent() {
		if _, err := awaitCall(ctx, s.raft.VerifyLeader); err != nil {
			return nil, fmt.Errorf("server %s verifying its leadership for a consistent read: %w", s.cfg.Name, err)
		}
	}
	wait := durations.FromMs(q.GetMaxWaitMs())
	if wait <= 0 {
		wait = defaultQueryWait
	}
	wait = min(wait, maxQueryWait)
	var index uint64
	var err error
	if q.GetMinIndex() == 0 {
		index, err = fn(nil, s.fsm.State().Snapshot())
	} else {
		qctx, cancel := context.WithTimeout(ctx, wait)
		// A shutting-down server ends its long polls at once rather than
		// holding up its RPC server's graceful stop.
		stop := context.AfterFunc(s.shutdownCtx, cancel)
		index, err = s.fsm.State().BlockingQuery(qctx, q.GetMinIndex(), fn)
		stop()
		cancel()
		// The wait running out is the normal end of a blocking query, and
		// BlockingQuery answers it with the current state. The caller's own
		// context ending, or shutdown, is not an answer.
		switch {
		case err != nil:
		case ctx.Err() != nil:
			err = ctx.Err()
		case s.shutdownCtx.Err() != nil:
			err = status.Errorf(codes.Unavailable, "server %s is shutting down", s.cfg.Name)
		}
	}
	if err != nil {
		return nil, err
	}
	return s.queryMeta(index), nil
}

func (s *Server) queryMeta(index uint64) *pb.QueryMeta {
	_, leader := s.raft.LeaderWithID()
	meta := &pb.QueryMeta{Index: max(index, 1), KnownLeader: leader != "", ServedBy: s.id}
	if !s.IsLeader() {
		if lc := s.raft.LastContact(); !lc.IsZero() {
			meta.LastContactMs = time.Since(lc).Milliseconds()
		}
	}
	return meta
}
