package taskrunner

import (
	"fmt"
	"time"

	"berth.dev/berth/internal/durations"
	"berth.dev/berth/rpc/pb"
)

// DefaultServiceRestart and DefaultBatchRestart are the restart policies of
// a group that has none (Nomad's defaults).
var (
	DefaultServiceRestart = &pb.RestartPolicy{Attempts: 2, IntervalMs: (30 * time.Minute).Milliseconds(),
		DelayMs: (15 * time.Second).Milliseconds(), Mode: pb.RestartMode_RESTART_MODE_FAIL}
	DefaultBatchRestart = &pb.RestartPolicy{Attempts: 3, IntervalMs: (24 * time.Hour).Milliseconds(),
		DelayMs: (15 * time.Second).Milliseconds(), Mode: pb.RestartMode_RESTART_MODE_FAIL}
)

// restartTracker decides, per exit, whether a task starts again and when,
// from its group's restart policy: at most attempts restarts within one
// interval (counted from the first restart of that interval); past that,
// mode fail stops restarting and mode delay waits for the interval to end,
// then starts again with a fresh count.
type restartTracker struct {
	policy *pb.RestartPolicy
	// count is the restarts made in the interval that began at start.
	count int
	start time.Time
}

func newRestartTracker(p *pb.RestartPolicy, jobType pb.JobType) *restartTracker {
	if p == nil {
		p = DefaultServiceRestart
		if jobType == pb.JobType_JOB_TYPE_BATCH {
			p = DefaultBatchRestart
		}
	}
	return &restartTracker{policy: p}
}

// decision is what happens after an exit.
type decision struct {
	restart bool
	delay   time.Duration
	// reason is for the task event.
	reason string
}

// next decides after a failure (or the exit of a task that must keep
// running) at now.
func (r *restartTracker) next(now time.Time) decision {
	interval := durations.FromMs(r.policy.GetIntervalMs())
	delay := durations.FromMs(r.policy.GetDelayMs())
	if r.start.IsZero() || now.Sub(r.start) >= interval {
		r.start, r.count = now, 0
	}
	attempts := int(r.policy.GetAttempts())
	if r.count < attempts {
		r.count++
		return decision{restart: true, delay: delay,
			reason: fmt.Sprintf("restart %d of %d in %s", r.count, attempts, interval)}
	}
	if r.policy.GetMode() == pb.RestartMode_RESTART_MODE_DELAY {
		wait := max(r.start.Add(interval).Sub(now), delay)
		r.start, r.count = now.Add(wait), 0
		return decision{restart: true, delay: wait,
			reason: fmt.Sprintf("exceeded %d restarts in %s; mode is delay, waiting for the interval to end", attempts, interval)}
	}
	return decision{reason: fmt.Sprintf("exceeded %d restarts in %s and the restart mode is fail", attempts, interval)}
}
