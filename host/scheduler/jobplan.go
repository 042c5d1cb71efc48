package scheduler

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// PlanJob answers `job plan`: what registering job would change. It diffs
// job against the stored version and runs Schedule against st with job in
// its place (as the next version when it differs), without applying
// anything. The response's groups carry the diff and the plan's
// annotations; failed_tg_allocs says why placements would fail. The
// Result is returned too, for callers that want the would-be plan.
func PlanJob(st State, job *pb.Job, opts Options) (*pb.JobPlanResponse, *Result, error) {
	if job.GetId() == "" {
		return nil, nil, fmt.Errorf("%w: job to plan has no ID", ErrBadEvaluation)
	}
	if opts.NewID == nil {
		return nil, nil, fmt.Errorf("%w: NewID is nil", ErrBadOptions)
	}
	cur, err := st.Job(job.GetId())
	if err != nil {
		return nil, nil, &StateError{What: "job " + job.GetId(), Err: err}
	}
	d := Diff(cur, job)
	next := proto.Clone(job).(*pb.Job)
	next.Stop = false
	if cur != nil {
		next.CreateIndex = cur.GetCreateIndex()
		next.JobModifyIndex = cur.GetJobModifyIndex()
		next.Version = cur.GetVersion()
		if d.Type != DiffNone || cur.GetStop() {
			next.Version = cur.GetVersion() + 1
		}
	}
	eval := &pb.Evaluation{
		Id:          opts.NewID(),
		Priority:    next.GetPriority(),
		Type:        next.GetType(),
		TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER,
		JobId:       next.GetId(),
		Status:      pb.EvalStatus_EVAL_STATUS_PENDING,
	}
	res, err := Schedule(&planState{State: st, job: next}, eval, opts)
	if err != nil {
		return nil, nil, err
	}
	resp := &pb.JobPlanResponse{
		JobModifyIndex: cur.GetJobModifyIndex(),
		DiffType:       d.Type,
		Fields:         d.Fields,
		FailedTgAllocs: res.Eval.GetFailedTgAllocs(),
	}
	for _, g := range d.Groups {
		if a := res.Plan.GetAnnotations()[g.GetName()]; a != nil {
			g.Updates = a
		}
		resp.Groups = append(resp.Groups, g)
	}
	return resp, res, nil
}

// planState is st with the planned job as the current version.
type planState struct {
	State
	job *pb.Job
}

func (p *planState) Job(id string) (*pb.Job, error) {
	if id == p.job.GetId() {
		return p.job, nil
	}
	return p.State.Job(id)
}

func (p *planState) JobVersion(id string, v uint64) (*pb.Job, error) {
	if id == p.job.GetId() && v == p.job.GetVersion() {
		return p.job, nil
	}
	return p.State.JobVersion(id, v)
}
