package evals

import (
	"sort"
	"time"

	"berth.dev/berth/internal/rules"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/pb"
)

// Evaluations are made by whoever proposes the change that needs one, and
// travel inside that change's command, so a change is never applied without
// the evaluation that acts on it (a leader that dies between two commands
// would otherwise leave a registered job nobody schedules).

// New makes a pending evaluation of job for trigger, created at now.
func New(now time.Time, job *pb.Job, trigger pb.EvalTrigger) *pb.Evaluation {
	at := now.UnixNano()
	return &pb.Evaluation{
		Id:             uuid.Generate(),
		Priority:       job.GetPriority(),
		Type:           job.GetType(),
		TriggeredBy:    trigger,
		JobId:          job.GetId(),
		JobModifyIndex: job.GetJobModifyIndex(),
		Status:         pb.EvalStatus_EVAL_STATUS_PENDING,
		CreatedAt:      at,
		ModifiedAt:     at,
	}
}

// ForNode makes, at now, one evaluation per job that must look at node nodeID
// after its status, eligibility or drain changed: every job with a
// non-terminal alloc there and, when the node can take work (systemToo),
// every system job, which places on a node that joins.
func ForNode(st *fsm.StateSnapshot, now time.Time, nodeID string, trigger pb.EvalTrigger, systemToo bool) ([]*pb.Evaluation, error) {
	jobs := map[string]*pb.Job{}
	allocs, err := st.AllocsByNode(nil, nodeID)
	if err != nil {
		return nil, err
	}
	for _, a := range allocs {
		if rules.AllocTerminal(a) {
			continue
		}
		if _, seen := jobs[a.GetJobId()]; seen {
			continue
		}
		job, err := st.JobByID(nil, a.GetJobId())
		if err != nil {
			return nil, err
		}
		if job == nil {
			// A purged job's allocs are stopped by the evaluation its
			// purge made; the job is gone, but the scheduler still needs
			// its ID to find them.
			job = &pb.Job{Id: a.GetJobId(), Priority: 50}
		}
		jobs[job.GetId()] = job
	}
	if systemToo {
		sys, _, err := st.JobsPage(nil, "", 0, func(j *pb.Job) bool { return j.GetType() == pb.JobType_JOB_TYPE_SYSTEM })
		if err != nil {
			return nil, err
		}
		for _, j := range sys {
			if !j.GetStop() {
				jobs[j.GetId()] = j
			}
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	evals := make([]*pb.Evaluation, 0, len(ids))
	for _, id := range ids {
		e := New(now, jobs[id], trigger)
		e.NodeId = nodeID
		evals = append(evals, e)
	}
	return evals, nil
}
