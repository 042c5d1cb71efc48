package fsm

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"berth.dev/berth/rpc/pb"
)

// ResultOf waits for a future returned by raft.Apply and returns the raft
// index the command was applied at, or why it was not: a raft error (such as
// raft.ErrNotLeader, wrapped) or the command's own error from Apply (such as
// ErrNodeNotFound, wrapped; the entry's index is returned with it, since the
// entry is in the log even though it changed nothing). It hides raft's
// untyped Response.
//
// When ctx ends first ResultOf returns ctx's error; the command may still be
// committed and applied later. The raft future itself is bounded by the
// timeout given to raft.Apply.
func ResultOf(ctx context.Context, f raft.ApplyFuture) (uint64, error) {
	res, err := FullResultOf(ctx, f)
	if res == nil {
		return 0, err
	}
	return res.Index, err
}

// FullResultOf is ResultOf for commands whose apply returns a value (see
// ApplyResult.Value): the whole result, with the command's own error. The
// result is nil when the command was not applied (a raft error, ctx).
func FullResultOf(ctx context.Context, f raft.ApplyFuture) (*ApplyResult, error) {
	if err := Await(ctx, f); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("waiting for raft apply (the command may still be applied): %w", err)
		}
		return nil, fmt.Errorf("raft apply: %w", err)
	}
	res, ok := f.Response().(*ApplyResult)
	if !ok || res == nil {
		return nil, fmt.Errorf("%w: %T", ErrUnexpectedResponse, f.Response())
	}
	return res, res.Err
}

// PlanResultOf waits for the future of a PlanApply and returns what of the
// plan was applied, as ResultOf does for the index. A plan refused as a
// whole (ErrJobNotFound, ErrJobVersionNotFound, ErrInvalidCommand) returns
// that error; a plan some of whose nodes refused is no error: the result
// lists them (refused_nodes, refusals) and the scheduler plans again.
func PlanResultOf(ctx context.Context, f raft.ApplyFuture) (*pb.PlanResult, error) {
	index, err := ResultOf(ctx, f)
	if err != nil {
		return nil, err
	}
	res, _ := f.Response().(*ApplyResult)
	pr, ok := res.Response.(*pb.PlanResult)
	if !ok || pr == nil {
		return nil, fmt.Errorf("%w: entry %d answered %T, not a plan result", ErrUnexpectedResponse, index, res.Response)
	}
	return pr, nil
}

// Await waits for any raft future, or for ctx to end, whichever comes
// first, and returns the future's error or ctx's. A ctx that has already
// ended wins even over a completed future, so callers see one answer for
// "the caller gave up". Raft's futures offer only a blocking Error, so a
// goroutine waits on it; when ctx wins, that goroutine stays until raft
// answers, which raft bounds (the enqueue timeout given to the call, a lost
// leadership, shutdown).
func Await(ctx context.Context, f raft.Future) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
