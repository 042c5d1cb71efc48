package server

import (
	"context"
	"sort"
	"time"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// drainer moves allocs off draining nodes on the leader. Non-system allocs
// go first: each is marked to migrate (stop, and replace elsewhere) with an
// evaluation of its job. System allocs follow once every non-system alloc
// of the node has stopped on its client (or the deadline passed), so the
// node's system services — log shippers, CSI node plugins — outlive the
// workloads that use them. When nothing is left (system allocs aside with
// ignore_system_jobs) the drain ends; the node stays ineligible. At the
// drain's deadline everything still there is marked at once.
//
// It wakes on changes to nodes and allocs (a state watch), on a drain
// being set through the API (kick) and on the earliest deadline (a timer).
type drainer struct {
	s      *Server
	kicked chan struct{}
}

func newDrainer(s *Server) *drainer {
	return &drainer{s: s, kicked: make(chan struct{}, 1)}
}

// kick wakes the drainer (a drain was set); a no-op while it does not run.
func (d *drainer) kick() {
	select {
	case d.kicked <- struct{}{}:
	default:
	}
}

func (d *drainer) run(ctx context.Context) {
	var deadline Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		ws := memdb.NewWatchSet()
		next, failed := d.step(ctx, ws)
		if failed {
			// A write that did not commit is tried again soon, not at the
			// next unrelated change.
			if retry := d.s.cfg.Clock.Now().Add(time.Second); next.IsZero() || retry.Before(next) {
				next = retry
			}
		}
		if deadline != nil {
			deadline.Stop()
			deadline = nil
		}
		if !next.IsZero() {
			deadline = d.s.cfg.Clock.AfterFunc(max(next.Sub(d.s.cfg.Clock.Now()), 0), d.kick)
		}
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-d.kicked:
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

// step acts on every draining node and returns the earliest deadline still
// ahead (zero if none), and whether a write failed.
func (d *drainer) step(ctx context.Context, ws memdb.WatchSet) (next time.Time, failed bool) {
	s := d.s
	snap := s.fsm.State().Snapshot()
	nodes, err := snap.Nodes(ws)
	if err != nil {
		s.logger.Error("drainer: reading nodes", "error", err)
		return time.Time{}, true
	}
	now := s.cfg.Clock.Now()
	jobs := map[string]*pb.Job{}
	jobOf := func(id string) *pb.Job {
		if j, ok := jobs[id]; ok {
			return j
		}
		j, _ := snap.JobByID(nil, id)
		jobs[id] = j
		return j
	}
	for _, n := range nodes {
		strategy := n.GetDrain()
		if strategy == nil {
			continue
		}
		forced := strategy.GetForceDeadlineAt() != 0 && now.UnixNano() >= strategy.GetForceDeadlineAt()
		if !forced && strategy.GetForceDeadlineAt() != 0 {
			at := time.Unix(0, strategy.GetForceDeadlineAt())
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		allocs, err := snap.AllocsByNode(ws, n.GetId())
		if err != nil {
			s.logger.Error("drainer: reading allocs", "node", n.GetId(), "error", err)
			continue
		}
		var userLive, systemLive int
		var migrate []*pb.Allocation
		var system []*pb.Allocation
		for _, a := range allocs {
			if fsm.AllocClientTerminal(a) {
				continue
			}
			isSystem := jobOf(a.GetJobId()).GetType() == pb.JobType_JOB_TYPE_SYSTEM
			if isSystem {
				if strategy.GetIgnoreSystemJobs() {
					continue
				}
				systemLive++
				if !fsm.AllocServerTerminal(a) && !a.GetDesiredTransition().GetMigrate() {
					system = append(system, a)
				}
				continue
			}
			userLive++
			if !fsm.AllocServerTerminal(a) && !a.GetDesiredTransition().GetMigrate() {
				migrate = append(migrate, a)
			}
		}
		if forced || userLive == 0 {
			migrate = append(migrate, system...)
		}
		switch {
		case len(migrate) > 0:
			failed = !d.migrate(ctx, n, migrate, jobOf) || failed
		case userLive == 0 && systemLive == 0:
			failed = !d.finish(ctx, n) || failed
		}
	}
	return next, failed
}

// migrate marks allocs of node n to move off it, with one evaluation per job.
func (d *drainer) migrate(ctx context.Context, n *pb.Node, allocs []*pb.Allocation, jobOf func(string) *pb.Job) bool {
	s := d.s
	cmd := &pb.AllocDesiredTransitionCommand{Allocs: map[string]*pb.DesiredTransition{}, UpdatedAt: s.cfg.Clock.Now().UnixNano()}
	seen := map[string]bool{}
	for _, a := range allocs {
		job := jobOf(a.GetJobId())
		// System allocs are not marked no_replace: the draining node is
		// unschedulable anyway, and no_replace would keep the system job
		// off it after the drain, once it is made eligible again.
		cmd.Allocs[a.GetId()] = &pb.DesiredTransition{Migrate: true}
		if seen[a.GetJobId()] {
			continue
		}
		seen[a.GetJobId()] = true
		if job == nil {
			job = &pb.Job{Id: a.GetJobId(), Priority: 50}
		}
		e := s.newEval(job, pb.EvalTrigger_EVAL_TRIGGER_NODE_DRAIN)
		e.NodeId = n.GetId()
		cmd.Evals = append(cmd.Evals, e)
	}
	sort.Slice(cmd.Evals, func(i, j int) bool { return cmd.Evals[i].GetJobId() < cmd.Evals[j].GetJobId() })
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := s.raftApply(actx, fsm.AllocDesiredTransition, cmd); err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("drainer: marking allocs to migrate", "node", n.GetId(), "allocs", len(allocs), "error", err)
		}
		return false
	}
	s.logger.Info("drainer: migrating allocs", "node", n.GetId(), "allocs", len(allocs))
	return true
}

// finish ends a drain whose node has nothing left to move.
func (d *drainer) finish(ctx context.Context, n *pb.Node) bool {
	s := d.s
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := s.raftApply(actx, fsm.NodeDrain, &pb.NodeDrainCommand{NodeId: n.GetId(), UpdatedAt: s.cfg.Clock.Now().UnixNano()}); err != nil {
		if ctx.Err() == nil {
			s.logger.Warn("drainer: ending drain", "node", n.GetId(), "error", err)
		}
		return false
	}
	s.logger.Info("drain complete", "node", n.GetId())
	return true
}
