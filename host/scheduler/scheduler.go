package scheduler

import (
	"fmt"
	"sort"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// State is the snapshot the scheduler reads. The server adapts its fsm
// reader to it; tests use schedtest.State. Every read must come from one
// snapshot, so a plan is consistent with the index it reports.
type State interface {
	// Index is the raft index of the snapshot; it becomes the plan's
	// snapshot_index.
	Index() uint64
	// Nodes returns every node, whatever its status; the scheduler filters.
	Nodes() ([]*pb.Node, error)
	// Node returns the node, or nil, nil when there is none.
	Node(id string) (*pb.Node, error)
	// Job returns the current version of the job, or nil, nil when it was
	// purged (or never registered).
	Job(id string) (*pb.Job, error)
	// JobVersion returns one stored version of the job, or nil, nil.
	JobVersion(id string, version uint64) (*pb.Job, error)
	// AllocsByJob returns every alloc of the job, terminal ones included.
	AllocsByJob(jobID string) ([]*pb.Allocation, error)
	// AllocsByNode returns every alloc on the node, terminal ones included.
	AllocsByNode(nodeID string) ([]*pb.Allocation, error)
	// Volume returns the volume, or nil, nil when none is registered.
	Volume(id string) (*pb.Volume, error)
	// ClaimsByVolume returns every claim the volume holds, whatever its
	// state: a claim holds its volume until it is freed.
	ClaimsByVolume(volumeID string) ([]*pb.Claim, error)
	// ClaimsByNode returns every claim held on the node.
	ClaimsByNode(nodeID string) ([]*pb.Claim, error)
	// Attachment returns the volume's attachment to the node (its
	// controller publish), or nil, nil when there is none. A node whose
	// attachment of a volume is detaching takes no new claim on it until
	// the attachment is gone (the state machine refuses one).
	Attachment(volumeID, nodeID string) (*pb.Attachment, error)
	// HostVolume returns the dynamic host volume, or nil, nil when none is
	// recorded.
	HostVolume(id string) (*pb.HostVolume, error)
}

// Options are what the scheduler would otherwise take from the world.
type Options struct {
	// Now is the time of the evaluation, unix nanoseconds. Reschedule
	// delays, health of updated allocs and follow-up evals are computed
	// from it.
	Now int64
	// NewID returns a fresh ID for allocs and follow-up evals.
	NewID func() string
	// MaxCandidates bounds how many fitting nodes are scored per placement;
	// 0 takes the default (see DefaultCandidates).
	MaxCandidates int
}

// Result is what one evaluation decided.
type Result struct {
	// Plan is the change to submit; empty (no stops, no allocs) when there
	// is nothing to do. Annotations are always filled.
	Plan *pb.Plan
	// Eval is the evaluation as it should be stored after this run: status
	// complete, with snapshot_index, failed_tg_allocs, queued_allocations,
	// plan_annotations, blocked_eval and next_eval filled. A blocked eval
	// (triggered_by queued-allocs) that still cannot place everything comes
	// back with status blocked instead, and no new blocked eval is made.
	Eval *pb.Evaluation
	// FollowUps are new evaluations to store with the plan: delayed
	// reschedules (pending, wait_until set), a blocked eval (status
	// blocked) when placements failed, and a rolling-update eval when
	// max_parallel held destructive updates back.
	FollowUps []*pb.Evaluation
}

var (
	// ErrBadEvaluation is returned by Schedule when the evaluation cannot
	// be scheduled: no job ID, or a job type the scheduler does not know.
	ErrBadEvaluation = errcode.New(codes.InvalidArgument, "evaluation cannot be scheduled")
	// ErrBadOptions is returned by Schedule when Options lacks NewID.
	ErrBadOptions = errcode.New(codes.Internal, "scheduler options are incomplete")
)

// StateError is returned when a read of the state snapshot failed; it
// names what was being read.
type StateError struct {
	What string
	Err  error
}

func (e *StateError) Error() string { return "scheduler: reading " + e.What + ": " + e.Err.Error() }

// Unwrap returns the state's own error, so its code travels.
func (e *StateError) Unwrap() error { return e.Err }

// Descriptions the scheduler writes on the allocs it stops; the CLI shows
// them in `alloc status`.
const (
	DescJobStopped   = "alloc not needed: job was stopped"
	DescGroupRemoved = "alloc not needed: its group was removed from the job"
	DescScaledDown   = "alloc not needed: group count was reduced"
	DescDuplicate    = "alloc not needed: another alloc holds its index"
	DescNodeLost     = "alloc lost: its node is down"
	DescMigrating    = "alloc is being migrated"
	DescNoReplace    = "alloc stopped without replacement"
	DescRescheduled  = "alloc was rescheduled because it failed"
	DescUpdated      = "alloc is being replaced by a new version of the job"
	// DescUpdatedAwaitingClaim: the new version cannot be placed while
	// this alloc holds its volume (a single-writer claim), so this one
	// stops first and the new one is placed once the claim is freed.
	DescUpdatedAwaitingClaim = "alloc is being replaced by a new version of the job, which waits for its volume claim"

	DescCompleted      = "alloc completed; a service alloc is replaced"
	DescNodeIneligible = "alloc not needed: its node is not eligible for the job"
	DescInfeasible     = "alloc not needed: its node no longer satisfies the job's constraints or drivers"
)

// Schedule runs one evaluation against a snapshot and returns the plan, the
// evaluation's new state and the follow-up evaluations. It reads only st
// and opts: the same inputs give the same result, byte for byte.
func Schedule(st State, eval *pb.Evaluation, opts Options) (*Result, error) {
	if opts.NewID == nil {
		return nil, fmt.Errorf("%w: NewID is nil", ErrBadOptions)
	}
	if eval.GetJobId() == "" {
		return nil, fmt.Errorf("%w: eval %s has no job ID", ErrBadEvaluation, eval.GetId())
	}
	job, err := st.Job(eval.GetJobId())
	if err != nil {
		return nil, &StateError{What: "job " + eval.GetJobId(), Err: err}
	}
	s, err := newSched(st, eval, job, opts)
	if err != nil {
		return nil, err
	}
	typ := eval.GetType()
	if job != nil {
		typ = job.GetType()
	}
	switch typ {
	case pb.JobType_JOB_TYPE_SERVICE, pb.JobType_JOB_TYPE_BATCH:
		err = s.generic(typ == pb.JobType_JOB_TYPE_BATCH)
	case pb.JobType_JOB_TYPE_SYSTEM:
		err = s.system()
	default:
		return nil, fmt.Errorf("%w: eval %s for job %s has type %s", ErrBadEvaluation, eval.GetId(), eval.GetJobId(), typ)
	}
	if err != nil {
		return nil, err
	}
	return s.finish(), nil
}

// sched holds one evaluation's work in progress.
type sched struct {
	st   State
	eval *pb.Evaluation
	job  *pb.Job // nil when purged
	opts Options
	plan *pb.Plan

	nodes    []*pb.Node // every node, by ID
	nodeByID map[string]*pb.Node
	pl       *placer

	annotations map[string]*pb.PlanAnnotation
	failed      map[string]*pb.AllocMetric
	queued      map[string]int32
	followUps   []*pb.Evaluation
	// rolling is set when max_parallel held destructive updates back;
	// rollingWait is the earliest time the next batch may go.
	rolling     bool
	rollingWait int64
	versions    map[uint64]*pb.Job
}

func newSched(st State, eval *pb.Evaluation, job *pb.Job, opts Options) (*sched, error) {
	nodes, err := st.Nodes()
	if err != nil {
		return nil, &StateError{What: "nodes", Err: err}
	}
	nodes = append([]*pb.Node(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].GetId() < nodes[j].GetId() })
	s := &sched{
		st:          st,
		eval:        eval,
		job:         job,
		opts:        opts,
		nodes:       nodes,
		nodeByID:    make(map[string]*pb.Node, len(nodes)),
		annotations: map[string]*pb.PlanAnnotation{},
		failed:      map[string]*pb.AllocMetric{},
		queued:      map[string]int32{},
		versions:    map[uint64]*pb.Job{},
	}
	for _, n := range nodes {
		s.nodeByID[n.GetId()] = n
	}
	s.plan = &pb.Plan{
		EvalId:        eval.GetId(),
		Priority:      eval.GetPriority(),
		JobId:         eval.GetJobId(),
		SnapshotIndex: st.Index(),
		Annotations:   s.annotations,
	}
	if job != nil {
		s.plan.JobVersion = job.GetVersion()
		s.plan.Priority = job.GetPriority()
		for _, g := range job.GetGroups() {
			s.annotation(g.GetName())
			s.queued[g.GetName()] = 0
		}
	}
	s.pl = newPlacer(s, nodes)
	return s, nil
}

func (s *sched) annotation(group string) *pb.PlanAnnotation {
	a := s.annotations[group]
	if a == nil {
		a = &pb.PlanAnnotation{}
		s.annotations[group] = a
	}
	return a
}

// jobVersion returns a stored version of the job, cached for the run.
func (s *sched) jobVersion(v uint64) (*pb.Job, error) {
	if j, ok := s.versions[v]; ok {
		return j, nil
	}
	j, err := s.st.JobVersion(s.eval.GetJobId(), v)
	if err != nil {
		return nil, &StateError{What: fmt.Sprintf("job %s version %d", s.eval.GetJobId(), v), Err: err}
	}
	s.versions[v] = j
	return j, nil
}

// stop adds an AllocStop to the plan and frees the alloc's resources for
// the rest of the run.
func (s *sched) stop(a *pb.Allocation, desc string, lost bool) {
	st := &pb.AllocStop{
		AllocId:            a.GetId(),
		DesiredStatus:      pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP,
		DesiredDescription: desc,
	}
	if lost {
		st.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST
	}
	s.plan.Stops = append(s.plan.Stops, st)
	s.pl.release(a)
}

// newEval returns a follow-up evaluation of this one.
func (s *sched) newEval(trigger pb.EvalTrigger, status pb.EvalStatus, waitUntil int64) *pb.Evaluation {
	e := &pb.Evaluation{
		Id:           s.opts.NewID(),
		Priority:     s.plan.GetPriority(),
		Type:         s.eval.GetType(),
		TriggeredBy:  trigger,
		JobId:        s.eval.GetJobId(),
		Status:       status,
		WaitUntil:    waitUntil,
		PreviousEval: s.eval.GetId(),
		// The state it was decided on: a blocked eval is woken only by
		// changes after it.
		SnapshotIndex: s.st.Index(),
		CreatedAt:     s.opts.Now,
		ModifiedAt:    s.opts.Now,
	}
	if s.job != nil {
		e.Type = s.job.GetType()
		e.JobModifyIndex = s.job.GetJobModifyIndex()
	}
	s.followUps = append(s.followUps, e)
	return e
}

// fail records a placement that found no node.
func (s *sched) fail(group string, m *pb.AllocMetric) {
	s.queued[group]++
	if prev := s.failed[group]; prev != nil || m == nil {
		if prev != nil {
			prev.CoalescedFailures++
		}
		return
	}
	s.failed[group] = m
}

func (s *sched) finish() *Result {
	ev := proto.Clone(s.eval).(*pb.Evaluation)
	ev.Status = pb.EvalStatus_EVAL_STATUS_COMPLETE
	ev.StatusDescription = ""
	ev.SnapshotIndex = s.st.Index()
	ev.ModifiedAt = s.opts.Now
	ev.PlanAnnotations = s.annotations
	ev.QueuedAllocations = s.queued
	ev.FailedTgAllocs = nil
	switch {
	case len(s.failed) > 0 && s.eval.GetTriggeredBy() == pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS:
		// A blocked eval run again that still cannot place everything is
		// blocked again itself, as Nomad re-blocks, rather than making a
		// new blocked eval per capacity change.
		ev.FailedTgAllocs = s.failed
		ev.Status = pb.EvalStatus_EVAL_STATUS_BLOCKED
		ev.StatusDescription = "some allocations could not be placed"
	case len(s.failed) > 0:
		ev.FailedTgAllocs = s.failed
		b := s.newEval(pb.EvalTrigger_EVAL_TRIGGER_QUEUED_ALLOCS, pb.EvalStatus_EVAL_STATUS_BLOCKED, 0)
		b.StatusDescription = "created to place remaining allocations"
		ev.BlockedEval = b.GetId()
		ev.StatusDescription = "some allocations could not be placed"
	}
	if s.rolling {
		r := s.newEval(pb.EvalTrigger_EVAL_TRIGGER_ROLLING_UPDATE, pb.EvalStatus_EVAL_STATUS_PENDING, s.rollingWait)
		r.StatusDescription = "created to continue a rolling update"
		ev.NextEval = r.GetId()
	}
	return &Result{Plan: s.plan, Eval: ev, FollowUps: s.followUps}
}

// Empty reports whether the plan changes nothing.
func (r *Result) Empty() bool {
	return len(r.Plan.GetStops()) == 0 && len(r.Plan.GetAllocs()) == 0
}
