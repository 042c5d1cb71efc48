package fsm

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// applyEvalUpsert creates or updates evaluations: the broker and workers
// moving them between statuses, blocked evals, follow-ups. Each keeps the
// create index of its first upsert. The jobs they are for have their
// status recomputed (a job whose last pending eval completes with nothing
// placed becomes dead).
func applyEvalUpsert(tx *writeTxn, cmd *pb.EvalUpsertCommand) error {
	if len(cmd.GetEvals()) == 0 {
		return fmt.Errorf("%w: no evaluations", ErrInvalidCommand)
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return err
	}
	jobs, err := upsertEvals(tx, cmd.GetEvals())
	if err != nil {
		return err
	}
	return recomputeJobStatuses(tx, jobs)
}

// checkEvals refuses evaluations no server could store: without an ID, or
// with no status. Every command that carries evals checks them before it
// writes anything.
func checkEvals(evals []*pb.Evaluation) error {
	for i, e := range evals {
		if e.GetId() == "" {
			return fmt.Errorf("%w: evaluation %d of %d (job %q) has no ID", ErrInvalidCommand, i+1, len(evals), e.GetJobId())
		}
		if e.GetStatus() == pb.EvalStatus_EVAL_STATUS_UNSPECIFIED {
			return fmt.Errorf("%w: evaluation %q (job %q) has no status", ErrInvalidCommand, e.GetId(), e.GetJobId())
		}
	}
	return nil
}

// upsertEvals stores evals (checked by checkEvals; owned by the command,
// so stored as they are), keeping each one's create index, and returns the
// jobs they are for, each once, in order of first appearance. A terminal
// evaluation's row is final (keepTerminalEval): an upsert of it is skipped.
func upsertEvals(tx *writeTxn, evals []*pb.Evaluation) ([]string, error) {
	var jobs []string
	for _, e := range evals {
		existing, err := evalsTable.first(tx, nil, e.GetId())
		if err != nil {
			return nil, err
		}
		keep, err := keepTerminalEval(tx, existing, e)
		if err != nil {
			return nil, err
		}
		if keep {
			continue
		}
		e.CreateIndex = tx.index
		if existing != nil {
			e.CreateIndex = existing.GetCreateIndex()
		}
		e.ModifyIndex = tx.index
		if err := evalsTable.insert(tx, e); err != nil {
			return nil, err
		}
		jobs = addID(jobs, e.GetJobId())
	}
	return jobs, nil
}

// addID appends id to ids unless it is empty or already there. The lists
// are short (the jobs of one command), so a scan beats a map.
func addID(ids []string, id string) []string {
	if id == "" || slices.Contains(ids, id) {
		return ids
	}
	return append(ids, id)
}

// EvalTerminal reports whether an evaluation is done with: complete,
// failed or canceled. Pending and blocked evals are live.
func EvalTerminal(e *pb.Evaluation) bool {
	switch e.GetStatus() {
	case pb.EvalStatus_EVAL_STATUS_COMPLETE, pb.EvalStatus_EVAL_STATUS_FAILED, pb.EvalStatus_EVAL_STATUS_CANCELED:
		return true
	}
	return false
}

// recomputeJobStatuses recomputes the status of each job in jobs.
func recomputeJobStatuses(tx *writeTxn, jobs []string) error {
	return recomputeJobStatusesLive(tx, jobs, "")
}

// recomputeJobStatusesLive is recomputeJobStatuses for a caller that has
// just stored an alloc of job live that is not terminal (a plan's
// placement), which is all jobStatus's scan of live's allocs would look
// for: that job's status is computed without it.
func recomputeJobStatusesLive(tx *writeTxn, jobs []string, live string) error {
	for _, id := range jobs {
		if err := recomputeJobStatus(tx, id, id == live); err != nil {
			return err
		}
	}
	return nil
}

// recomputeJobStatus stores the job's status as its allocs and evals now
// say (jobStatus), when it changed. Status is not the specification: the
// job's modify index moves, its job_modify_index and versions do not. A
// job that is not stored (purged) is left alone.
func recomputeJobStatus(tx *writeTxn, jobID string, hasLiveAlloc bool) error {
	job, err := jobsTable.first(tx, nil, jobID)
	if err != nil || job == nil {
		return err
	}
	status, err := jobStatus(tx, job, hasLiveAlloc)
	if err != nil {
		return err
	}
	if status == job.GetStatus() {
		return nil
	}
	j := proto.Clone(job).(*pb.Job)
	j.Status = status
	j.ModifyIndex = tx.index
	return jobsTable.insert(tx, j)
}

// errStopScan ends an index scan early; it never leaves the function
// that scans.
var errStopScan = errors.New("stop scan")

// jobStatus is the status a job's allocs and evals give it, as Nomad
// computes it:
//
//   - a system job is running until it is stopped, then dead;
//   - any alloc that is not terminal (rules.AllocTerminal) makes it running;
//   - else any eval not terminal (pending, blocked) makes it pending;
//   - else a stopped job, or one with terminal allocs or evals, is dead;
//   - else nothing is known of it (new, or its history collected): it
//     keeps its status, pending for a job never evaluated.
//
// The scans stop at the first live alloc or eval, so a running job costs
// one row; none when the caller knows it has an alloc that is not
// terminal (hasLiveAlloc).
func jobStatus(tx *writeTxn, job *pb.Job, hasLiveAlloc bool) (pb.JobStatus, error) {
	if job.GetType() == pb.JobType_JOB_TYPE_SYSTEM {
		if job.GetStop() {
			return pb.JobStatus_JOB_STATUS_DEAD, nil
		}
		return pb.JobStatus_JOB_STATUS_RUNNING, nil
	}
	if hasLiveAlloc {
		return pb.JobStatus_JOB_STATUS_RUNNING, nil
	}
	seen := false
	live := false
	err := allocsByJob.each(tx.readTxn(), nil, []string{job.GetId()}, func(a *pb.Allocation) error {
		seen = true
		if !rules.AllocTerminal(a) {
			live = true
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, err
	}
	if live {
		return pb.JobStatus_JOB_STATUS_RUNNING, nil
	}
	err = evalsByJob.each(tx.readTxn(), nil, []string{job.GetId()}, func(e *pb.Evaluation) error {
		seen = true
		if !EvalTerminal(e) {
			live = true
			return errStopScan
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return 0, err
	}
	switch {
	case live:
		return pb.JobStatus_JOB_STATUS_PENDING, nil
	case job.GetStop() || seen:
		return pb.JobStatus_JOB_STATUS_DEAD, nil
	case job.GetStatus() == pb.JobStatus_JOB_STATUS_UNSPECIFIED:
		return pb.JobStatus_JOB_STATUS_PENDING, nil
	}
	return job.GetStatus(), nil
}
