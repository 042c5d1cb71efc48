package server

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// Garbage collection: the leader proposes, every few minutes and on
// `berth system gc`, a GCCommand naming what is old and finished; the
// state machine removes only what is still collectable when the command
// applies, so nothing a live object references goes, whatever changed
// between the proposal and its apply.
//
// What is collected, once older than its threshold (forced: at once):
//   - evaluations that finished (complete, failed, canceled);
//   - allocs that ended on their client and that the servers no longer
//     need: stopped by the servers, replaced (next_allocation), or whose
//     job is stopped or gone;
//   - jobs that are stopped (or batch jobs that are dead) with no allocs
//     left and no pending evaluation, with their versions.

// gcConfig holds the collector's thresholds.
type gcConfig struct {
	interval time.Duration
	evalAge  time.Duration
	allocAge time.Duration
	jobAge   time.Duration
}

func defaultGCConfig() gcConfig {
	return gcConfig{interval: 5 * time.Minute, evalAge: time.Hour, allocAge: time.Hour, jobAge: 4 * time.Hour}
}

// runGC collects garbage every interval until ctx ends. GC is the one
// periodic loop here: nothing waits on it.
func (s *Server) runGC(ctx context.Context) {
	for {
		t := time.NewTimer(s.gc.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if _, err := s.collectGarbage(ctx, false); err != nil && ctx.Err() == nil {
			s.logger.Warn("garbage collection", "error", err)
		}
	}
}

// collectGarbage proposes one GCCommand with everything collectable now
// (forced: regardless of age) and reports how much it named.
func (s *Server) collectGarbage(ctx context.Context, force bool) (*pb.GCResponse, error) {
	snap := s.fsm.State().Snapshot()
	now := s.cfg.Clock.Now()
	old := func(at int64, age time.Duration) bool { return force || now.Sub(time.Unix(0, at)) >= age }
	cmd := &pb.GCCommand{}

	evals, err := snap.Evals(nil)
	if err != nil {
		return nil, err
	}
	for _, e := range evals {
		switch e.GetStatus() {
		case pb.EvalStatus_EVAL_STATUS_COMPLETE, pb.EvalStatus_EVAL_STATUS_FAILED, pb.EvalStatus_EVAL_STATUS_CANCELED:
			if old(e.GetModifiedAt(), s.gc.evalAge) {
				cmd.EvalIds = append(cmd.EvalIds, e.GetId())
			}
		}
	}
	allocs, err := snap.Allocs(nil)
	if err != nil {
		return nil, err
	}
	liveByJob := map[string]int{}
	for _, a := range allocs {
		job, err := snap.JobByID(nil, a.GetJobId())
		if err != nil {
			return nil, err
		}
		done := fsm.AllocClientTerminal(a) &&
			(fsm.AllocServerTerminal(a) || a.GetNextAllocation() != "" || job == nil || job.GetStop())
		if done && old(a.GetModifiedAt(), s.gc.allocAge) {
			cmd.AllocIds = append(cmd.AllocIds, a.GetId())
			continue
		}
		liveByJob[a.GetJobId()]++
	}
	jobs, err := snap.Jobs(nil)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		finished := j.GetStop() || (j.GetType() == pb.JobType_JOB_TYPE_BATCH && j.GetStatus() == pb.JobStatus_JOB_STATUS_DEAD)
		if finished && liveByJob[j.GetId()] == 0 && old(j.GetSubmittedAt(), s.gc.jobAge) {
			cmd.JobIds = append(cmd.JobIds, j.GetId())
		}
	}
	resp := &pb.GCResponse{Evals: int32(len(cmd.EvalIds)), Allocs: int32(len(cmd.AllocIds)), Jobs: int32(len(cmd.JobIds)), Meta: &pb.WriteMeta{}}
	if len(cmd.EvalIds)+len(cmd.AllocIds)+len(cmd.JobIds) == 0 {
		return resp, nil
	}
	idx, err := s.raftApply(ctx, fsm.GC, cmd)
	if err != nil {
		return nil, fmt.Errorf("garbage collection of %d evaluations, %d allocs, %d jobs: %w", resp.Evals, resp.Allocs, resp.Jobs, err)
	}
	resp.Meta.Index = idx
	s.logger.Info("garbage collected", "evals", resp.Evals, "allocs", resp.Allocs, "jobs", resp.Jobs)
	return resp, nil
}
