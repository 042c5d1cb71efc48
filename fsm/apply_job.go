package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// JobVersionsKept is how many versions of a job job_versions holds: a
// new version beyond it drops the oldest, as Nomad keeps six. The job
// itself (TableJobs) is always the newest.
const JobVersionsKept = 6

// applyJobRegister stores a new version of a job: version 0 for a new job,
// else the current version + 1. The job keeps its create index and status,
// is no longer stopped, and gets the command's index as modify and
// job_modify index. The version is also stored in job_versions, which
// keeps the newest JobVersionsKept. The command's eval is created for the
// new job_modify_index, and the job's status recomputed (pending for a
// new job, running for a system job).
func applyJobRegister(tx *writeTxn, cmd *pb.JobRegisterCommand) error {
	job := cmd.GetJob()
	if job == nil {
		return fmt.Errorf("%w: no job", ErrInvalidCommand)
	}
	if job.GetId() == "" {
		return fmt.Errorf("%w: job has no ID (name %q)", ErrInvalidCommand, job.GetName())
	}
	if err := checkJobEval(job.GetId(), cmd.GetEval()); err != nil {
		return err
	}
	existing, err := jobsTable.first(tx, nil, job.GetId())
	if err != nil {
		return err
	}
	if cmd.GetEnforceIndex() {
		if existing == nil && cmd.GetIfJobModifyIndex() != 0 {
			return fmt.Errorf("job %q is not registered, the registration was decided at job modify index %d: %w",
				job.GetId(), cmd.GetIfJobModifyIndex(), ErrJobChanged)
		}
		if existing != nil && existing.GetJobModifyIndex() != cmd.GetIfJobModifyIndex() {
			return fmt.Errorf("job %q is at job modify index %d, the registration was decided at %d: %w",
				job.GetId(), existing.GetJobModifyIndex(), cmd.GetIfJobModifyIndex(), ErrJobChanged)
		}
	}
	job.Stop = false
	job.Version = 0
	job.CreateIndex = tx.index
	job.Status = pb.JobStatus_JOB_STATUS_PENDING
	if existing != nil {
		job.Version = existing.GetVersion() + 1
		job.CreateIndex = existing.GetCreateIndex()
		job.Status = existing.GetStatus()
	}
	job.SubmittedAt = cmd.GetSubmittedAt()
	return storeJobVersion(tx, job, cmd.GetEval())
}

// applyJobDeregister stops a job or purges it. Stopping stores a new
// version with stop set (as Nomad does, so `job history` shows the stop
// and a revert undoes it); the scheduler then stops its allocs. Purging
// deletes the job and every stored version; its evals and allocs stay
// until garbage collection, so a purged job's allocs are still stopped by
// the eval and still shown. Either way the command's eval is created.
func applyJobDeregister(tx *writeTxn, cmd *pb.JobDeregisterCommand) error {
	id := cmd.GetJobId()
	if id == "" {
		return fmt.Errorf("%w: no job ID", ErrInvalidCommand)
	}
	if err := checkJobEval(id, cmd.GetEval()); err != nil {
		return err
	}
	existing, err := jobsTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	}
	if !cmd.GetPurge() {
		j := proto.Clone(existing).(*pb.Job)
		j.Stop = true
		j.Version = existing.GetVersion() + 1
		j.SubmittedAt = cmd.GetSubmittedAt()
		return storeJobVersion(tx, j, cmd.GetEval())
	}
	versions, err := jobVersionsTable.list(tx, nil, id)
	if err != nil {
		return err
	}
	if err := jobsTable.delete(tx, existing); err != nil {
		return err
	}
	for _, v := range versions {
		if err := jobVersionsTable.delete(tx, v); err != nil {
			return err
		}
	}
	if err := csiJobChanged(tx, existing, nil); err != nil {
		return err
	}
	if ev := cmd.GetEval(); ev != nil {
		ev.JobModifyIndex = tx.index
		if _, err := upsertEvals(tx, []*pb.Evaluation{ev}); err != nil {
			return err
		}
	}
	return nil
}

// applyJobRevert registers a stored version of a job again, as a new
// version (the current + 1) with that version's specification, stop
// included. With enforce_prior_version it applies only while the current
// version is prior_version.
func applyJobRevert(tx *writeTxn, cmd *pb.JobRevertCommand) error {
	id := cmd.GetJobId()
	if id == "" {
		return fmt.Errorf("%w: no job ID", ErrInvalidCommand)
	}
	if err := checkJobEval(id, cmd.GetEval()); err != nil {
		return err
	}
	cur, err := jobsTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if cur == nil {
		return fmt.Errorf("job %q: %w", id, ErrJobNotFound)
	}
	if cmd.GetEnforcePriorVersion() && cur.GetVersion() != cmd.GetPriorVersion() {
		return fmt.Errorf("job %q is at version %d, the revert was decided at version %d: %w",
			id, cur.GetVersion(), cmd.GetPriorVersion(), ErrJobChanged)
	}
	old, err := jobVersionsTable.first(tx, nil, id, versionKey(cmd.GetVersion()))
	if err != nil {
		return err
	}
	if old == nil {
		return fmt.Errorf("job %q has no version %d (it keeps the last %d): %w", id, cmd.GetVersion(), JobVersionsKept, ErrJobVersionNotFound)
	}
	j := proto.Clone(old).(*pb.Job)
	j.Version = cur.GetVersion() + 1
	j.CreateIndex = cur.GetCreateIndex()
	j.Status = cur.GetStatus()
	j.SubmittedAt = cmd.GetSubmittedAt()
	return storeJobVersion(tx, j, cmd.GetEval())
}

// checkJobEval refuses a job command's eval that has no ID or status, or
// is for another job.
func checkJobEval(jobID string, ev *pb.Evaluation) error {
	if ev == nil {
		return nil
	}
	if err := checkEvals([]*pb.Evaluation{ev}); err != nil {
		return err
	}
	if ev.GetJobId() != jobID {
		return fmt.Errorf("%w: evaluation %q is for job %q, the command for job %q", ErrInvalidCommand, ev.GetId(), ev.GetJobId(), jobID)
	}
	return nil
}

// storeJobVersion stores j, a new version of its job (version, create
// index, status and stop already set), as the job and in job_versions,
// dropping the oldest versions beyond JobVersionsKept; then creates ev
// (may be nil) for the new job_modify_index and recomputes the job's
// status. j is stored as it is and must not be changed afterwards.
func storeJobVersion(tx *writeTxn, j *pb.Job, ev *pb.Evaluation) error {
	prev, err := jobsTable.first(tx, nil, j.GetId())
	if err != nil {
		return err
	}
	j.ModifyIndex = tx.index
	j.JobModifyIndex = tx.index
	if err := jobsTable.insert(tx, j); err != nil {
		return err
	}
	if err := jobVersionsTable.insert(tx, j); err != nil {
		return err
	}
	versions, err := jobVersionsTable.list(tx, nil, j.GetId())
	if err != nil {
		return err
	}
	for len(versions) > JobVersionsKept {
		if err := jobVersionsTable.delete(tx, versions[0]); err != nil {
			return err
		}
		versions = versions[1:]
	}
	if err := csiJobChanged(tx, prev, j); err != nil {
		return err
	}
	if ev != nil {
		ev.JobModifyIndex = tx.index
		if _, err := upsertEvals(tx, []*pb.Evaluation{ev}); err != nil {
			return err
		}
	}
	return recomputeJobStatus(tx, j.GetId(), false)
}
