package server

import (
	"context"
	"time"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// feedBroker hands every pending evaluation in the state to the broker and
// makes blocked evaluations pending again when capacity may have appeared.
// It wakes on changes to the evaluations (a watch on the state, not a
// poll), so a registered job's evaluation reaches a worker as soon as its
// command is applied; at a new leader's start it restores the broker from
// whatever earlier leaders left pending.
func (s *Server) feedBroker(ctx context.Context) {
	logger := s.logger.Named("evals")
	// live is the number of allocs holding resources when blocked
	// evaluations were last looked at; a drop means capacity was freed.
	live := -1
	for {
		ws := memdb.NewWatchSet()
		snap := s.fsm.State().Snapshot()
		pending, err := snap.EvalsByStatus(ws, pb.EvalStatus_EVAL_STATUS_PENDING)
		if err != nil {
			logger.Error("reading pending evaluations", "error", err)
		}
		for _, e := range pending {
			s.broker.enqueue(e)
		}
		blocked, err := snap.EvalsByStatus(ws, pb.EvalStatus_EVAL_STATUS_BLOCKED)
		if err != nil {
			logger.Error("reading blocked evaluations", "error", err)
		}
		if len(blocked) > 0 {
			live = s.unblock(ctx, ws, snap, blocked, live)
		} else {
			live = -1
		}
		if err := ws.WatchCtx(ctx); err != nil {
			return
		}
	}
}

// unblock makes blocked evaluations pending again when a node changed
// since they were planned (joined, came back, became eligible) or allocs
// stopped holding resources. It returns the live alloc count it saw and
// adds the nodes and allocs tables to ws, so their changes wake the feed.
func (s *Server) unblock(ctx context.Context, ws memdb.WatchSet, snap *fsm.StateSnapshot, blocked []*pb.Evaluation, prevLive int) int {
	nodesIdx, _ := snap.Index(fsm.TableNodes)
	if _, err := snap.Nodes(ws); err != nil {
		return prevLive
	}
	allocs, _, err := snap.AllocsPage(ws, "", 0, nil)
	if err != nil {
		return prevLive
	}
	live := 0
	for _, a := range allocs {
		if !fsm.AllocTerminal(a) {
			live++
		}
	}
	freed := prevLive >= 0 && live < prevLive
	var wake []*pb.Evaluation
	now := s.cfg.Clock.Now().UnixNano()
	for _, e := range blocked {
		if freed || nodesIdx > e.GetSnapshotIndex() {
			u := proto.Clone(e).(*pb.Evaluation)
			u.Status = pb.EvalStatus_EVAL_STATUS_PENDING
			u.StatusDescription = "unblocked: capacity may have changed"
			u.TriggeredBy = pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS
			u.ModifiedAt = now
			wake = append(wake, u)
		}
	}
	if len(wake) > 0 {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := s.raftApply(actx, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: wake}); err != nil && ctx.Err() == nil {
			s.logger.Warn("unblocking evaluations", "count", len(wake), "error", err)
		}
	}
	return live
}
