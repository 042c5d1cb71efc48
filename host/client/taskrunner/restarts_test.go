package taskrunner

import (
	"math"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

func TestRestartTracker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fail := &pb.RestartPolicy{Attempts: 2, IntervalMs: 60_000, DelayMs: 1000, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	delay := &pb.RestartPolicy{Attempts: 1, IntervalMs: 60_000, DelayMs: 1000, Mode: pb.RestartMode_RESTART_MODE_DELAY}
	never := &pb.RestartPolicy{Attempts: 0, IntervalMs: 60_000, Mode: pb.RestartMode_RESTART_MODE_FAIL}
	type step struct {
		at      time.Duration // since t0
		restart bool
		delay   time.Duration
	}
	for _, tc := range []struct {
		name   string
		policy *pb.RestartPolicy
		steps  []step
	}{
		{"fail after attempts", fail, []step{{0, true, time.Second}, {2 * time.Second, true, time.Second}, {4 * time.Second, false, 0}}},
		{"a new interval counts afresh", fail, []step{{0, true, time.Second}, {time.Second, true, time.Second},
			{61 * time.Second, true, time.Second}, {62 * time.Second, true, time.Second}, {63 * time.Second, false, 0}}},
		{"delay waits for the interval's end", delay, []step{{0, true, time.Second}, {10 * time.Second, true, 50 * time.Second},
			{61 * time.Second, true, time.Second}, {62 * time.Second, true, 58 * time.Second}}}, // the new interval began at 60s, when the delayed restart ran
		{"delay is at least the delay", delay, []step{{0, true, time.Second}, {59*time.Second + 800*time.Millisecond, true, time.Second}}},
		{"no attempts never restarts", never, []step{{0, false, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestartTracker(tc.policy, pb.JobType_JOB_TYPE_SERVICE)
			for i, s := range tc.steps {
				d := r.next(t0.Add(s.at))
				if d.restart != s.restart || (s.restart && d.delay != s.delay) || d.reason == "" {
					t.Fatalf("step %d at %s: %+v, want restart %t delay %s", i, s.at, d, s.restart, s.delay)
				}
			}
		})
	}
}

func TestDefaultRestartPolicies(t *testing.T) {
	if p := newRestartTracker(nil, pb.JobType_JOB_TYPE_BATCH).policy; p != DefaultBatchRestart {
		t.Fatalf("batch default %v", p)
	}
	if p := newRestartTracker(nil, pb.JobType_JOB_TYPE_SERVICE).policy; p != DefaultServiceRestart {
		t.Fatalf("service default %v", p)
	}
}

// A delay stored before validation bounded it (2^63-1 ms) saturates: the
// restart waits as long as a duration can, not a wrapped negative delay
// that restarted the task at once.
func TestRestartDelayOutOfRangeSaturates(t *testing.T) {
	p := &pb.RestartPolicy{Attempts: 1, IntervalMs: math.MaxInt64, DelayMs: math.MaxInt64, Mode: pb.RestartMode_RESTART_MODE_DELAY}
	r := newRestartTracker(p, pb.JobType_JOB_TYPE_SERVICE)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 2 {
		if d := r.next(now); !d.restart || d.delay < 24*time.Hour {
			t.Fatalf("exit %d: %+v, want a restart after the longest delay", i, d)
		}
	}
}
