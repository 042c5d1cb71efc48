package volumeloops

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/pb"
)

// The reaper moves claims on where their client cannot: a releasing claim
// (its claimant is terminal; the state machine moved it there in the
// apply that stopped the alloc) waits for its node's node-detached report,
// but a node that is down past force_detach_after, fenced, or gone will
// never send one, so the reaper forces the claim to node-detached with a
// ClaimUpdate (force). The state machine then frees it at once when no
// attachment is left, or moves the attachment to detaching when it was the
// last live claim, and the attach reconciler unpublishes: the controller
// unpublish still runs for a lost node.
//
// As a safety net for state an older server left, a node-detached claim
// whose node has no attachment of its volume is freed (the state machine
// frees such claims in the apply that makes them so).
//
// It is a state watch on the releasing and node-detached claims and on the
// nodes they are on, with one timer for the earliest down node's deadline.

// runReaper is the reaper's loop.
func (v *Loops) runReaper(ctx context.Context) {
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ws := memdb.NewWatchSet()
		store := v.state()
		ws.Add(store.AbandonCh())
		next, failed := v.reapPass(ctx, ws, store.Snapshot())
		if failed {
			if retry := v.clock.Now().Add(v.cfg.writeRetry); next.IsZero() || retry.Before(next) {
				next = retry
			}
		}
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if !next.IsZero() {
			timer = v.timerAt(next, poke)
		}
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-wake:
				cancel()
			case <-wctx.Done():
			}
		}()
		_ = ws.WatchCtx(wctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// reapPass proposes what is due and returns the earliest deadline still
// ahead (zero if none), and whether a write failed.
func (v *Loops) reapPass(ctx context.Context, ws memdb.WatchSet, snap *fsm.StateSnapshot) (next time.Time, failed bool) {
	now := v.clock.Now()
	releasing, err := snap.ClaimsByState(ws, pb.ClaimState_CLAIM_STATE_RELEASING)
	if err != nil {
		v.logger.Error("reaper: reading releasing claims", "error", err)
		return time.Time{}, true
	}
	// One command per node: its claims are forced for one reason, and a
	// node that came back refuses them all together.
	byNode := map[string][]*pb.ClaimTransition{}
	// volumeOf names each claim's volume in the log lines.
	volumeOf := map[string]string{}
	var nodes []string
	reasons := map[string]string{}
	for _, c := range releasing {
		id := c.GetNodeId()
		if _, seen := reasons[id]; !seen {
			node, err := snap.NodeByID(ws, id)
			if err != nil {
				v.logger.Error("reaper: reading node", "node", id, "error", err)
				failed = true
				continue
			}
			reason, at := forceDetachReason(node, now, v.cfg.forceDetachAfter)
			reasons[id] = reason
			if !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
			}
		}
		if reasons[id] == "" {
			continue
		}
		if _, seen := byNode[id]; !seen {
			nodes = append(nodes, id)
		}
		byNode[id] = append(byNode[id], &pb.ClaimTransition{ClaimId: c.GetId(), State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, Force: true})
		volumeOf[c.GetId()] = c.GetVolumeId()
	}
	for _, id := range nodes {
		ts := byNode[id]
		res, err := v.writeResult(ctx, fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: ts, UpdatedAt: now.UnixNano()})
		if err != nil {
			if ctx.Err() == nil {
				v.logger.Warn("reaper: forcing claims to node-detached; retrying", "node", id, "reason", reasons[id],
					"claims", claimIDs(ts), "volumes", volumesOf(ts, volumeOf), "error", err)
				failed = true
			}
			continue
		}
		// What the apply moved: a claim its client reported detached, or
		// that went, since this pass read it is not the reaper's doing.
		moved := int32(0)
		if r, ok := res.Response.(*pb.ClaimUpdateResult); ok {
			moved = r.GetMoved()
		}
		forceDetached.Add(float64(moved))
		v.logger.Info("claims detached from a lost node", "node", id, "reason", reasons[id], "forced", moved,
			"claims", claimIDs(ts), "volumes", volumesOf(ts, volumeOf))
	}

	detached, err := snap.ClaimsByState(ws, pb.ClaimState_CLAIM_STATE_NODE_DETACHED)
	if err != nil {
		v.logger.Error("reaper: reading node-detached claims", "error", err)
		return next, true
	}
	var free []*pb.ClaimTransition
	for _, c := range detached {
		a, err := snap.Attachment(ws, c.GetVolumeId(), c.GetNodeId())
		if err != nil {
			v.logger.Error("reaper: reading attachment", "volume", c.GetVolumeId(), "node", c.GetNodeId(), "error", err)
			failed = true
			continue
		}
		if a == nil {
			free = append(free, &pb.ClaimTransition{ClaimId: c.GetId(), State: pb.ClaimState_CLAIM_STATE_FREED})
			volumeOf[c.GetId()] = c.GetVolumeId()
		}
	}
	if len(free) > 0 {
		if err := v.write(ctx, fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: free, UpdatedAt: now.UnixNano()}); err != nil {
			if ctx.Err() == nil && !errors.Is(err, fsm.ErrClaimTransition) {
				v.logger.Warn("reaper: freeing detached claims; retrying", "claims", claimIDs(free), "volumes", volumesOf(free, volumeOf), "error", err)
				failed = true
			}
		} else {
			v.logger.Info("detached claims freed", "claims", claimIDs(free), "volumes", volumesOf(free, volumeOf))
		}
	}
	return next, failed
}

// forceDetachReason says why a node's releasing claims may be forced to
// node-detached now ("" when they may not), and when they may be if the
// node stays down (zero when no deadline applies).
func forceDetachReason(node *pb.Node, now time.Time, after time.Duration) (string, time.Time) {
	switch {
	case node == nil:
		return "node is gone", time.Time{}
	case node.GetFenced():
		return "node is fenced", time.Time{}
	case node.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN:
		at := time.Unix(0, node.GetStatusUpdatedAt()).Add(after)
		if !now.Before(at) {
			return "node down for " + after.String() + " (force_detach_after)", time.Time{}
		}
		return "", at
	}
	return "", time.Time{}
}

func claimIDs(ts []*pb.ClaimTransition) []string {
	ids := make([]string, 0, len(ts))
	for _, t := range ts {
		ids = append(ids, t.GetClaimId())
	}
	slices.Sort(ids)
	return ids
}

// volumesOf lists, sorted and once each, the volumes of the claims in ts.
func volumesOf(ts []*pb.ClaimTransition, volumeOf map[string]string) []string {
	var out []string
	for _, t := range ts {
		out = append(out, volumeOf[t.GetClaimId()])
	}
	slices.Sort(out)
	return slices.Compact(out)
}
