package evals

import (
	"context"
	"errors"
	"fmt"
	"time"

	"berth.dev/berth/internal/versions"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/scheduler"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// Scheduler workers run on the leader only. Each takes an evaluation from
// the broker, plans from a snapshot of the local state (the leader's own,
// so it is never behind what the broker handed out), and proposes the plan
// as one PlanApply command whose apply re-checks every node it touches.
// Plans of different jobs may be in raft together; the state machine, not
// a plan queue, serializes them, and a refused node makes the worker plan
// again from a newer snapshot. Workers on followers (Nomad's design) would
// spread the scheduler's CPU over the servers at the cost of a forwarded
// plan and a follower that may lag what it plans from; with the plan
// re-checked at apply either is correct, and the leader-only design keeps
// the path from job register to placement one raft round shorter.

// maxPlanAttempts bounds how often one evaluation is planned again after
// the state machine refused part of its plan before the worker gives the
// evaluation back to the broker.
const maxPlanAttempts = 5

// planApplyTimeout bounds one plan's trip through raft.
const planApplyTimeout = 30 * time.Second

// runWorkers starts, through spawn, n scheduler workers that run until
// ctx (the leadership) ends.
func (r *Runner) runWorkers(ctx context.Context, n int, spawn func(func())) {
	for i := range n {
		spawn(func() { r.worker(ctx, i) })
	}
}

func (r *Runner) worker(ctx context.Context, id int) {
	logger := r.logger.Named("worker").With("worker", id)
	for {
		eval, token, err := r.broker.dequeue(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrBrokerDisabled) {
				logger.Error("dequeue", "error", err)
			}
			return
		}
		done, planned, err := r.processEval(ctx, eval)
		if err == nil {
			if aerr := r.broker.ackPlanned(eval.GetId(), token, done, planned); aerr != nil {
				logger.Warn("ack", "eval", eval.GetId(), "error", aerr)
			}
			continue
		}
		if ctx.Err() != nil {
			r.broker.requeue(eval.GetId(), token)
			return
		}
		logger.Warn("evaluation failed; handing it back", "eval", eval.GetId(), "job", eval.GetJobId(), "error", err)
		if nerr := r.broker.nack(eval.GetId(), token); errors.Is(nerr, errDeliveryLimit) {
			idx := r.failEval(ctx, eval, err)
			r.broker.forget(eval.GetId(), idx)
			if idx == 0 {
				r.retryFeed()
			}
		} else if nerr != nil {
			logger.Warn("nack", "eval", eval.GetId(), "error", nerr)
		}
	}
}

// processEval plans eval until its plan is applied whole, and returns the
// raft index that recorded the evaluation's outcome and the index of the
// state its last plan was made from.
func (r *Runner) processEval(ctx context.Context, eval *pb.Evaluation) (done, planned uint64, err error) {
	for attempt := 1; ; attempt++ {
		snap := r.core.State().Snapshot()
		if planned, err = snap.LatestIndex(); err != nil {
			return 0, 0, err
		}
		if idx, ended, err := endedMeanwhile(snap, eval, planned); ended || err != nil {
			return idx, planned, err
		}
		now := r.cfg.Clock.Now().UnixNano()
		if idx, refused, err := r.refuseOverLimits(ctx, snap, eval); refused {
			return idx, planned, err
		}
		res, err := r.schedule(snap, eval, now)
		if err != nil {
			return 0, 0, fmt.Errorf("scheduling evaluation %s of job %s: %w", eval.GetId(), eval.GetJobId(), err)
		}
		evals := append([]*pb.Evaluation{res.Eval}, res.FollowUps...)
		// This run decided everything about the job the older blocked
		// evaluations waited to decide: it placed what they could not, or
		// it is (or made) the job's one blocked evaluation. Cancelling them
		// keeps one blocked evaluation per job, and lets a stopped job's
		// status reach dead.
		older, err := r.olderBlocked(snap, eval, res)
		if err != nil {
			return 0, 0, err
		}
		evals = append(evals, older...)
		for _, e := range evals {
			e.ModifiedAt = now
		}
		if r.hooks.BeforePlan != nil {
			r.hooks.BeforePlan(ctx, eval)
		}
		result, idx, err := r.applyPlanParts(ctx, planParts(snap, res.Plan, r.cfg.PlanPartBytes), evals)
		if err != nil {
			return 0, 0, fmt.Errorf("applying the plan of evaluation %s of job %s: %w", eval.GetId(), eval.GetJobId(), err)
		}
		if len(result.GetRefusedNodes()) == 0 {
			return idx, planned, nil
		}
		r.logger.Debug("plan partly refused; planning again", "eval", eval.GetId(), "job", eval.GetJobId(),
			"refused", result.GetRefusals(), "attempt", attempt)
		if attempt == maxPlanAttempts {
			return 0, 0, fmt.Errorf("evaluation %s of job %s: the state refused its plan %d times (last: %v)",
				eval.GetId(), eval.GetJobId(), attempt, result.GetRefusals())
		}
	}
}

// applyPlanParts applies the parts of one plan in order, the evaluations
// with the last, and stops at the first part a node refused (the result
// then names it; the parts applied stay, and planning again sees them). A
// plan's evaluation is therefore recorded only once every part applied.
func (r *Runner) applyPlanParts(ctx context.Context, parts []*pb.Plan, evals []*pb.Evaluation) (*pb.PlanResult, uint64, error) {
	var (
		result *pb.PlanResult
		idx    uint64
		err    error
	)
	for i, part := range parts {
		cmd := &pb.PlanApplyCommand{Plan: part}
		if i == len(parts)-1 {
			cmd.Evals = evals
		}
		// The rows the plan writes are stamped when it is proposed, not
		// when scheduling began: a claim's created_at is when it was
		// reserved.
		cmd.AppliedAt = r.cfg.Clock.Now().UnixNano()
		pctx, cancel := context.WithTimeout(ctx, planApplyTimeout)
		result, idx, err = r.applyPlan(pctx, cmd)
		cancel()
		if err != nil {
			if len(parts) > 1 {
				err = fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
			}
			return nil, 0, err
		}
		if len(result.GetRefusedNodes()) > 0 {
			break
		}
	}
	return result, idx, nil
}

// planParts splits plan, when its placements, stops and claims are over
// budget bytes, into plans of whole nodes under it (a node's stops,
// placements and claims stay in one part, so each node still takes or
// refuses its share as one), in the order the nodes first appear. An
// all_at_once plan is never split: it must apply whole or not at all.
func planParts(snap *fsm.StateSnapshot, plan *pb.Plan, budget int) []*pb.Plan {
	if plan.GetAllAtOnce() || proto.Size(plan) <= budget {
		return []*pb.Plan{plan}
	}
	type nodePart struct {
		stops  []*pb.AllocStop
		allocs []*pb.Allocation
		claims []*pb.Claim
		size   int
	}
	byNode := map[string]*nodePart{}
	var order []string
	part := func(node string) *nodePart {
		p := byNode[node]
		if p == nil {
			p = &nodePart{}
			byNode[node] = p
			order = append(order, node)
		}
		return p
	}
	allocNode := make(map[string]string, len(plan.GetAllocs()))
	for _, a := range plan.GetAllocs() {
		p := part(a.GetNodeId())
		p.allocs = append(p.allocs, a)
		p.size += proto.Size(a)
		allocNode[a.GetId()] = a.GetNodeId()
	}
	for _, st := range plan.GetStops() {
		node, ok := allocNode[st.GetAllocId()]
		if !ok {
			if a, err := snap.AllocByID(nil, st.GetAllocId()); err == nil && a != nil {
				node = a.GetNodeId()
			}
		}
		p := part(node)
		p.stops = append(p.stops, st)
		p.size += proto.Size(st)
	}
	for _, c := range plan.GetClaims() {
		node, ok := allocNode[c.GetAllocId()]
		if !ok {
			node = c.GetNodeId()
		}
		p := part(node)
		p.claims = append(p.claims, c)
		p.size += proto.Size(c)
	}
	header := func() *pb.Plan {
		return &pb.Plan{EvalId: plan.GetEvalId(), Priority: plan.GetPriority(), JobId: plan.GetJobId(),
			JobVersion: plan.GetJobVersion(), SnapshotIndex: plan.GetSnapshotIndex()}
	}
	out := []*pb.Plan{header()}
	size := 0
	for _, node := range order {
		np := byNode[node]
		cur := out[len(out)-1]
		if size > 0 && size+np.size > budget {
			cur = header()
			out = append(out, cur)
			size = 0
		}
		cur.Stops = append(cur.Stops, np.stops...)
		cur.Allocs = append(cur.Allocs, np.allocs...)
		cur.Claims = append(cur.Claims, np.claims...)
		size += np.size
	}
	out[len(out)-1].Annotations = plan.GetAnnotations()
	return out
}

// olderBlocked returns the job's other blocked evaluations, cancelled.
func (r *Runner) olderBlocked(snap *fsm.StateSnapshot, eval *pb.Evaluation, res *scheduler.Result) ([]*pb.Evaluation, error) {
	evals, err := snap.EvalsByJob(nil, eval.GetJobId())
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{eval.GetId(): true}
	for _, f := range res.FollowUps {
		keep[f.GetId()] = true
	}
	var out []*pb.Evaluation
	for _, e := range evals {
		if e.GetStatus() != pb.EvalStatus_EVAL_STATUS_BLOCKED || keep[e.GetId()] {
			continue
		}
		c := proto.Clone(e).(*pb.Evaluation)
		c.Status = pb.EvalStatus_EVAL_STATUS_CANCELED
		c.StatusDescription = fmt.Sprintf("superseded by evaluation %s", eval.GetId())
		out = append(out, c)
	}
	return out, nil
}

// schedule runs the pure scheduler on snap.
func (r *Runner) schedule(snap *fsm.StateSnapshot, eval *pb.Evaluation, now int64) (*scheduler.Result, error) {
	return scheduler.Schedule(schedState{snap}, eval, scheduler.Options{Now: now, NewID: uuid.Generate})
}

// planHistorySince is the first berth version whose servers refuse a plan
// made from a state above the store's latest index
// (PlanApplyCommand.refuse_unseen_history). Until every server records it,
// plans are proposed without the flag and every server applies them as
// before.
var planHistorySince = versions.MustConstraint(">= " + PlanHistorySinceVersion)

// PlanHistorySinceVersion is the version planHistorySince names.
const PlanHistorySinceVersion = "0.1.0-dev.2"

// applyPlan proposes a plan and returns what the state machine applied.
func (r *Runner) applyPlan(ctx context.Context, cmd *pb.PlanApplyCommand) (*pb.PlanResult, uint64, error) {
	// Refused only while some server is older: the plan then applies
	// under the rule every server knows.
	cmd.RefuseUnseenHistory = r.core.RequireServersAt(planHistorySince, PlanHistorySinceVersion, "plans refused from an unseen history") == nil
	start := time.Now()
	res, err := r.core.ApplyResult(ctx, fsm.PlanApply, cmd)
	observePlanApply(start, err)
	if err != nil {
		return nil, 0, err
	}
	pr, _ := res.Response.(*pb.PlanResult)
	if pr == nil {
		return nil, 0, fmt.Errorf("plan apply at index %d: %w: %T", res.Index, fsm.ErrUnexpectedResponse, res.Response)
	}
	return pr, res.Index, nil
}

// failEval records that eval could not be processed, with a follow-up
// evaluation a minute later, so a job whose evaluations keep failing (a
// scheduler bug, a plan the state keeps refusing) is retried without a
// tight loop and the failure is visible in `eval status`.
// It returns the index of the write, 0 when it failed.
func (r *Runner) failEval(ctx context.Context, eval *pb.Evaluation, cause error) uint64 {
	now := r.cfg.Clock.Now()
	failed := proto.Clone(eval).(*pb.Evaluation)
	followUp := &pb.Evaluation{
		Id:             uuid.Generate(),
		Priority:       eval.GetPriority(),
		Type:           eval.GetType(),
		TriggeredBy:    pb.EvalTrigger_EVAL_TRIGGER_MAX_PLANS,
		JobId:          eval.GetJobId(),
		JobModifyIndex: eval.GetJobModifyIndex(),
		Status:         pb.EvalStatus_EVAL_STATUS_PENDING,
		WaitUntil:      now.Add(time.Minute).UnixNano(),
		PreviousEval:   eval.GetId(),
		CreatedAt:      now.UnixNano(),
		ModifiedAt:     now.UnixNano(),
	}
	failed.Status = pb.EvalStatus_EVAL_STATUS_FAILED
	failed.StatusDescription = cause.Error()
	failed.NextEval = followUp.GetId()
	failed.ModifiedAt = now.UnixNano()
	actx, cancel := context.WithTimeout(ctx, planApplyTimeout)
	defer cancel()
	idx, err := r.core.Apply(actx, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{failed, followUp}})
	if err != nil {
		r.logger.Error("recording a failed evaluation", "eval", eval.GetId(), "job", eval.GetJobId(), "error", err)
		return 0
	}
	return idx
}

// refuseOverLimits fails eval, for good, when its job is stored over this
// server's job limits and is not stopped: one taken by a leader with
// higher limits, or before they existed. Planning it could cost what the
// limits exist to prevent (a count of two billion took an agent to 22.9
// GB), on every leader in turn. No follow-up is made: a new register or a
// stop of the job evaluates it again. A stopped job is planned as usual,
// so an operator can always stop one.
func (r *Runner) refuseOverLimits(ctx context.Context, snap *fsm.StateSnapshot, eval *pb.Evaluation) (index uint64, refused bool, err error) {
	job, err := snap.JobByID(nil, eval.GetJobId())
	if err != nil || job == nil || job.GetStop() {
		return 0, false, nil
	}
	lerr := jobspec.CheckLimits(job, r.cfg.JobLimits)
	if lerr == nil {
		return 0, false, nil
	}
	r.logger.Warn("not planning a job over the job limits", "eval", eval.GetId(), "job", job.GetId(), "error", lerr)
	failed := proto.Clone(eval).(*pb.Evaluation)
	failed.Status = pb.EvalStatus_EVAL_STATUS_FAILED
	failed.StatusDescription = fmt.Sprintf("job %s version %d: %v", job.GetId(), job.GetVersion(), lerr)
	failed.ModifiedAt = r.cfg.Clock.Now().UnixNano()
	actx, cancel := context.WithTimeout(ctx, planApplyTimeout)
	defer cancel()
	idx, err := r.core.Apply(actx, fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{failed}})
	if err != nil {
		// Not recorded: the worker hands it back, and it is refused
		// again, never planned.
		return 0, true, fmt.Errorf("recording evaluation %s refused over the job limits: %w", eval.GetId(), err)
	}
	return idx, true, nil
}
