package volumehooks

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/rpc/pb"
)

// TearDownUnrun takes down, in the background, the claims of an alloc
// this client never ran and never will: one stopped (or ended) before the
// client first saw it, or whose job was purged before it was fetched.
// Such an alloc has no runner, so no volume hook tears its claims down,
// and without its job the client cannot tell its volumes; the servers
// answer them (ClientClaims with alloc_id). Each releasing claim (a
// terminal alloc's claims are, from the apply that made it terminal)
// goes through the teardown an alloc's volume hook starts
// (joined if one is under way): the alloc's use of the volume unpublished
// if the node holds one (a use left by a client that died mid-publish),
// the volume unstaged if no other user is left, and only then the
// node-detached report queued. So a claim is never reported off the node
// while its volume may still be staged or published for it.
//
// modifyIndex is the alloc's modify index as the servers sent it: a
// server that has not applied the alloc's stop (which moves its claims to
// releasing in the same write) is waited on, and asked again if its wait
// runs out first. A list that fails is tried
// again with capped backoff until ctx or the client's context ends.
func (v *VolumeHooks) TearDownUnrun(ctx context.Context, lister ClaimLister, allocID string, modifyIndex uint64) {
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		ctx, cancel := bothContexts(ctx, v.cfg.Context)
		defer cancel()
		var minIndex uint64
		if modifyIndex > 0 {
			minIndex = modifyIndex - 1
		}
		wait := v.cfg.RetryStart
		for {
			resp, err := lister.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: v.cfg.NodeID, AllocId: allocID,
				Query: &pb.QueryOptions{MinIndex: minIndex}})
			if idx := resp.GetMeta().GetIndex(); err == nil && idx < modifyIndex {
				// The wait ran out on a server that has not applied the
				// alloc as this client saw it: ask again (after a pause:
				// a server whose blocking query does not block).
				err = fmt.Errorf("the servers answered at index %d, before the alloc's modify index %d", idx, modifyIndex)
			}
			if err == nil {
				for _, c := range resp.GetClaims() {
					// An older server ignores alloc_id and lists the
					// operators' claims: those are not this alloc's.
					if c.GetAllocId() != allocID || c.GetNodeId() != v.cfg.NodeID {
						continue
					}
					// A terminal alloc's claims are releasing from the
					// apply that made it terminal on; node-detached or
					// further, nothing is left for the node to do.
					if c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
						continue
					}
					v.logger.Info("taking down the claim of an alloc this client never ran", "alloc_id", allocID,
						"volume_id", c.GetVolumeId(), "claim_id", c.GetId(), "claim_state", c.GetState())
					v.startTeardown(allocID, false, c.GetVolumeId(), nil)
				}
				return
			}
			if ctx.Err() != nil {
				return
			}
			v.logger.Warn("listing the claims of an alloc this client never ran", "alloc_id", allocID, "retry_in", wait, "error", err)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(wait*2, v.cfg.RetryMax)
		}
	}()
}

// bothContexts is a context that ends when either a or b does.
func bothContexts(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}
