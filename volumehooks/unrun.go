package volumehooks

import (
	"context"
	"fmt"

	"berth.dev/berth/internal/backoff"
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
// released runs once every releasing claim of the alloc is taken down and
// its node-detached report queued (at once if the alloc holds none): the
// caller reports the alloc ended only then, for once it is ended the
// servers may collect it, and a claim still releasing would then be sent
// to no client again. It does not run if ctx or the client's context
// ends first.
//
// modifyIndex is the alloc's modify index as the servers sent it: a
// server that has not applied the alloc's stop (which moves its claims to
// releasing in the same write) is waited on, and asked again if its wait
// runs out first. A list that fails is tried again with capped backoff;
// an older server, which ignores alloc_id (its answer does not echo it),
// is asked again only every OlderServerWait: its answer says nothing of
// the alloc's claims. Both until ctx (the caller ends it when the alloc
// is no longer sent) or the client's context ends.
func (v *VolumeHooks) TearDownUnrun(ctx context.Context, lister ClaimLister, allocID string, modifyIndex uint64, released func()) {
	v.wg.Add(1)
	go func() {
		defer v.wg.Done()
		ctx, cancel := bothContexts(ctx, v.cfg.Context)
		defer cancel()
		claims, ok := v.listUnrun(ctx, lister, allocID, modifyIndex)
		if !ok {
			return
		}
		var dones []<-chan struct{}
		for _, c := range claims {
			v.logger.Info("taking down the claim of an alloc this client never ran", "alloc_id", allocID,
				"volume_id", c.GetVolumeId(), "claim_id", c.GetId(), "claim_state", c.GetState())
			dones = append(dones, v.startTeardown(allocID, false, c.GetVolumeId(), nil))
		}
		for _, done := range dones {
			select {
			case <-done:
			case <-ctx.Done():
				return
			}
		}
		// A teardown ends without its report only when the client's
		// context does (the next start finishes it).
		if ctx.Err() == nil && released != nil {
			released()
		}
	}()
}

// listUnrun returns the releasing claims allocID holds on the node, as a
// server that understood the question answers them; ok is false if ctx
// ended first.
func (v *VolumeHooks) listUnrun(ctx context.Context, lister ClaimLister, allocID string, modifyIndex uint64) (claims []*pb.Claim, ok bool) {
	var minIndex uint64
	if modifyIndex > 0 {
		minIndex = modifyIndex - 1
	}
	// Each ask that does not return spaces the next one further, an older
	// server's too (whose own pause is OlderServerWait).
	for tries := 1; ; tries++ {
		resp, err := lister.ClientClaims(ctx, &pb.ClientClaimsRequest{NodeId: v.cfg.NodeID, AllocId: allocID,
			Query: &pb.QueryOptions{MinIndex: minIndex}})
		pause := v.cfg.retry().Delay(tries)
		switch {
		case err != nil:
		case resp.GetAllocId() != allocID:
			// An older server ignores alloc_id and lists the operators'
			// claims (and answers at the claims table's index, which may
			// stay below the alloc's for good): nothing to learn from it
			// until the servers are upgraded.
			err = fmt.Errorf("the servers do not list an alloc's claims (an older version); the alloc's claims are taken down once they do")
			pause = v.cfg.OlderServerWait
		case resp.GetMeta().GetIndex() < modifyIndex:
			// The wait ran out on a server that has not applied the
			// alloc as this client saw it: ask again (after a pause: a
			// server whose blocking query does not block).
			err = fmt.Errorf("the servers answered at index %d, before the alloc's modify index %d", resp.GetMeta().GetIndex(), modifyIndex)
		default:
			for _, c := range resp.GetClaims() {
				// A terminal alloc's claims are releasing from the apply
				// that made it terminal on; node-detached or further,
				// nothing is left for the node to do.
				if c.GetAllocId() == allocID && c.GetNodeId() == v.cfg.NodeID && c.GetState() == pb.ClaimState_CLAIM_STATE_RELEASING {
					claims = append(claims, c)
				}
			}
			return claims, true
		}
		if ctx.Err() != nil {
			return nil, false
		}
		v.logger.Warn("listing the claims of an alloc this client never ran", "alloc_id", allocID, "retry_in", pause, "error", err)
		if !backoff.Sleep(ctx.Done(), pause) {
			return nil, false
		}
	}
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
