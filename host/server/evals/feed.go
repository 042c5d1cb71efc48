package evals

import (
	"context"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// feedBroker hands every pending evaluation in the state to the broker and
// hands it blocked evaluations again, in memory (unblock), when capacity
// may have appeared.
// It wakes on changes to the evaluations (a watch on the state, not a
// poll), so a registered job's evaluation reaches a worker as soon as its
// command is applied; at a new leader's start it restores the broker from
// whatever earlier leaders left pending, and wakes every blocked
// evaluation once (what freed capacity while no leader watched is
// unknown).
func (r *Runner) feedBroker(ctx context.Context) {
	logger := r.logger.Named("evals")
	first := true
	for {
		ws := memdb.NewWatchSet()
		snap := r.core.State().Snapshot()
		pending, err := snap.EvalsByStatus(ws, pb.EvalStatus_EVAL_STATUS_PENDING)
		if err != nil {
			logger.Error("reading pending evaluations", "error", err)
		}
		for _, e := range pending {
			r.broker.enqueue(e)
		}
		if idx, err := snap.Index(fsm.TableEvals); err == nil {
			r.broker.prune(idx)
		}
		retry := false
		blocked, err := snap.EvalsByStatus(ws, pb.EvalStatus_EVAL_STATUS_BLOCKED)
		if err != nil {
			logger.Error("reading blocked evaluations; retrying", "error", err)
			retry = true
		}
		if len(blocked) > 0 {
			if err := r.unblock(ws, snap, blocked, first); err != nil {
				if ctx.Err() == nil {
					logger.Warn("unblocking evaluations; retrying", "count", len(blocked), "error", err)
				}
				// first stays: the retry wakes every blocked evaluation,
				// not only those this pass reached before the error.
				retry = true
			}
		}
		if !retry {
			first = false
		}
		wctx, cancel := context.WithCancel(ctx)
		go r.feedRetryTimer(wctx, cancel, retry)
		_ = ws.WatchCtx(wctx) // ends on a change, the retry timer or ctx
		cancel()
		if ctx.Err() != nil {
			return
		}
	}
}

// unblock hands blocked evaluations to the broker again when the cluster
// changed in a way that may make room since they were planned: a node
// changed (joined, came back, became eligible, was drained), or an alloc
// stopped holding resources or was changed by the servers (stopped,
// moved, updated in place — a job update that shrinks an alloc frees
// room without changing how many allocs run). A client's status update
// that leaves an alloc running changes nothing here. A job that claims
// volumes is also woken by a claim freed, an attachment removed or a
// change to the volumes after its snapshot (volumesChangedAt). With all, every blocked evaluation is
// woken. A woken evaluation goes to the broker in memory (Broker.wake),
// not through a raft write that makes it pending first: the apply that
// frees a claim wakes the feed, whose worker plans from that state and
// reserves the claim for the next alloc in the plan it proposes at once,
// with no raft round between (the plan records the evaluation's outcome).
// It adds the nodes table, the allocs' freed index and the volumes blocked
// jobs claim to ws, so their changes wake the feed.
func (r *Runner) unblock(ws memdb.WatchSet, snap *fsm.StateSnapshot, blocked []*pb.Evaluation, all bool) error {
	nodesIdx, err := snap.Index(fsm.TableNodes)
	if err != nil {
		return err
	}
	volumesIdx, err := volumesChangedAt(snap)
	if err != nil {
		return err
	}
	if _, err := snap.Nodes(ws); err != nil {
		return err
	}
	// freedAt is the latest index at which an alloc freed or changed
	// capacity: one row the store keeps, where reading every alloc cost
	// the leader a scan of them on each change to the evaluations while
	// any was blocked. Its watch fires only when it moves, so a client's
	// update of a running alloc no longer wakes the feed either.
	freedAt, err := snap.AllocsFreedIndex(ws)
	if err != nil {
		return err
	}
	latest, err := snap.LatestIndex()
	if err != nil {
		return err
	}
	for _, e := range blocked {
		if r.unblockFault != nil {
			if err := r.unblockFault(e); err != nil {
				return err
			}
		}
		// Woken already and not yet handed out: planned from a fresh
		// state when it is, so this pass need not read its job, watch
		// its volumes or copy it (until workers drain a new leader's
		// backlog, every pass meets all of them).
		if r.broker.holdsIdle(e.GetId()) {
			continue
		}
		since := e.GetSnapshotIndex()
		claimsVolumes, err := watchJobVolumes(ws, snap, e.GetJobId())
		if err != nil {
			return err
		}
		// change is the latest change since the evaluation's state that
		// may make room for it.
		var change uint64
		for _, idx := range []uint64{nodesIdx, freedAt} {
			if idx > since {
				change = max(change, idx)
			}
		}
		if claimsVolumes && volumesIdx > since {
			change = max(change, volumesIdx)
		}
		if all {
			change = max(change, latest)
		}
		if change == 0 {
			continue
		}
		// The copy keeps the row's status, blocked: nothing of it but
		// its outcome reaches the state, written by the plan (the
		// scheduler sets status, description and time there). Until
		// then `eval status` shows it blocked, whether it waits for
		// capacity or, woken, for a worker.
		u := proto.Clone(e).(*pb.Evaluation)
		u.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS
		r.broker.wake(u, change)
	}
	return nil
}
