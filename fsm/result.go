package fsm

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
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
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("raft apply: %w", err)
		}
	case <-ctx.Done():
		return 0, fmt.Errorf("waiting for raft apply (the command may still be applied): %w", ctx.Err())
	}
	res, ok := f.Response().(*ApplyResult)
	if !ok || res == nil {
		return 0, fmt.Errorf("%w: %T", ErrUnexpectedResponse, f.Response())
	}
	return res.Index, res.Err
}
