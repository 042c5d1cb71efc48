package nodes

import (
	"context"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/pb"
)

// Drainer moves allocs off draining nodes on the leader. Non-system allocs
// go first: each is marked to migrate (stop, and replace elsewhere) with an
// evaluation of its job. An alloc running a CSI plugin is held until what
// uses the plugin's volumes on the node is gone and its volumes are
// node-detached (drain_order.go). System allocs follow once every other
// non-system alloc of the node has stopped on its client (or the deadline
// passed), so the node's system services — log shippers, CSI node plugins
// — outlive the workloads that use them. When nothing is left (system
// allocs aside with ignore_system_jobs) the drain ends; the node stays
// ineligible. At the drain's deadline everything still there is marked at
// once, plugins in a second write.
//
// It wakes on changes to nodes and allocs (a state watch), on a drain
// being set through the API (kick) and on the earliest deadline (a timer).
type Drainer struct {
	core   Core
	clock  clock.Clock
	logger hclog.Logger
	kicked chan struct{}
	// held are the plugin allocs the last step held back (logged once
	// each); only the run goroutine uses it.
	held map[string]bool
	// stepped is the state index the last step acted on, so a test can
	// tell that the drainer has seen a change and still held an alloc.
	stepped atomic.Uint64
}

// Stepped returns the state index the drainer's last step acted on.
func (d *Drainer) Stepped() uint64 { return d.stepped.Load() }

// NewDrainer returns the drainer over core; Run runs it for one leadership.
func NewDrainer(core Core, clk clock.Clock, logger hclog.Logger) *Drainer {
	return &Drainer{core: core, clock: clk, logger: logger, kicked: make(chan struct{}, 1)}
}

// Kick wakes the drainer (a drain was set); a no-op while it does not run.
func (d *Drainer) Kick() {
	select {
	case d.kicked <- struct{}{}:
	default:
	}
}

// Run moves allocs off draining nodes until ctx (the leadership) ends.
func (d *Drainer) Run(ctx context.Context) {
	var deadline clock.Timer
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
			if retry := d.clock.Now().Add(time.Second); next.IsZero() || retry.Before(next) {
				next = retry
			}
		}
		if deadline != nil {
			deadline.Stop()
			deadline = nil
		}
		if !next.IsZero() {
			deadline = d.clock.AfterFunc(max(next.Sub(d.clock.Now()), 0), d.Kick)
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
func (d *Drainer) step(ctx context.Context, ws memdb.WatchSet) (next time.Time, failed bool) {
	snap := d.core.State().Snapshot()
	nodes, err := snap.Nodes(ws)
	if err != nil {
		d.logger.Error("drainer: reading nodes", "error", err)
		return time.Time{}, true
	}
	now := d.clock.Now()
	held := map[string]bool{}
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
		dn, err := readDrainNode(snap, ws, n, jobOf)
		if err != nil {
			d.logger.Error("drainer: reading the node's allocs and claims", "node", n.GetId(), "error", err)
			continue
		}
		plan := dn.plan(forced)
		d.logHeld(n, plan, held)
		switch {
		case len(plan.mark) > 0 || len(plan.plugins) > 0:
			// Plugins go in a write of their own after the rest: at the
			// deadline it is all the order left to keep.
			ok := len(plan.mark) == 0 || d.migrate(ctx, n, plan.mark, jobOf)
			if ok && len(plan.plugins) > 0 {
				ok = d.migrate(ctx, n, plan.plugins, jobOf)
			}
			failed = !ok || failed
		case plan.done:
			failed = !d.finish(ctx, n) || failed
		}
	}
	d.held = held
	if idx, err := snap.LatestIndex(); err == nil {
		d.stepped.Store(idx)
	}
	return next, failed
}

// logHeld logs, once per alloc, the plugin allocs plan holds back and the
// ones it releases from a cycle of holds, and records the held ones in
// held.
func (d *Drainer) logHeld(n *pb.Node, plan drainPlan, held map[string]bool) {
	for id, by := range plan.held {
		held[id] = true
		if d.held[id] {
			continue
		}
		const most = 5
		shown := by[:min(len(by), most)]
		d.logger.Info("drainer: plugin alloc waits for the users of its volumes on the node",
			"node", n.GetId(), "alloc", id, "users", strings.Join(shown, ","), "more", len(by)-len(shown))
	}
	if len(plan.cycle) > 0 {
		d.logger.Warn("drainer: plugin allocs use each other's volumes; stopping them together",
			"node", n.GetId(), "allocs", strings.Join(plan.cycle, ","))
	}
}

// migrate marks allocs of node n to move off it, with one evaluation per job.
func (d *Drainer) migrate(ctx context.Context, n *pb.Node, allocs []*pb.Allocation, jobOf func(string) *pb.Job) bool {
	cmd := &pb.AllocDesiredTransitionCommand{Allocs: map[string]*pb.DesiredTransition{}, UpdatedAt: d.clock.Now().UnixNano()}
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
		e := evals.New(d.clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_NODE_DRAIN)
		e.NodeId = n.GetId()
		cmd.Evals = append(cmd.Evals, e)
	}
	sort.Slice(cmd.Evals, func(i, j int) bool { return cmd.Evals[i].GetJobId() < cmd.Evals[j].GetJobId() })
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := d.core.Apply(actx, fsm.AllocDesiredTransition, cmd); err != nil {
		if ctx.Err() == nil {
			d.logger.Warn("drainer: marking allocs to migrate", "node", n.GetId(), "allocs", len(allocs), "error", err)
		}
		return false
	}
	d.logger.Info("drainer: migrating allocs", "node", n.GetId(), "allocs", len(allocs))
	return true
}

// finish ends a drain whose node has nothing left to move.
func (d *Drainer) finish(ctx context.Context, n *pb.Node) bool {
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := d.core.Apply(actx, fsm.NodeDrain, &pb.NodeDrainCommand{NodeId: n.GetId(), UpdatedAt: d.clock.Now().UnixNano()}); err != nil {
		if ctx.Err() == nil {
			d.logger.Warn("drainer: ending drain", "node", n.GetId(), "error", err)
		}
		return false
	}
	d.logger.Info("drain complete", "node", n.GetId())
	return true
}
