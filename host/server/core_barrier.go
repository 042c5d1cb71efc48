package server

import (
	"context"
	"fmt"

	"berth.dev/berth/fsm"
)

// Barrier waits until every command raft committed before the call is
// applied to this server's state (a raft barrier: a no-op entry queued
// behind them). Only the leader may call it.
func (c core) Barrier(ctx context.Context) error {
	if h := c.s.opts.hooks; h != nil && h.barrier != nil {
		h.barrier()
	}
	timeout, err := raftTimeout(ctx)
	if err != nil {
		return fmt.Errorf("barrier on server %s: %w", c.s.cfg.Name, err)
	}
	if err := fsm.Await(ctx, c.s.raft.Barrier(timeout)); err != nil {
		return fmt.Errorf("barrier on server %s: %w", c.s.cfg.Name, err)
	}
	// Raft's barrier does not wait for a snapshot it installed that is
	// still decoding (fsm.DeferRestores).
	if !c.s.fsm.WaitRestored(ctx) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("barrier on server %s: waiting for a snapshot's decoding: %w", c.s.cfg.Name, err)
		}
		return fmt.Errorf("barrier on server %s: the snapshot raft installed did not decode", c.s.cfg.Name)
	}
	return nil
}
