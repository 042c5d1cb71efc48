package evals

import (
	"time"

	"berth.dev/berth/internal/promtext"
)

// The scheduler's metrics; labels are the outcome only.
var (
	evalDuration = promtext.NewHistogramVec("berth_eval_duration_seconds",
		"Time from an evaluation becoming ready in the leader's broker (enqueued, or returned by a nack's backoff; "+
			"a wait_until delay not counted) to its ack or nack, by result (ack, nack): queueing behind its job and scheduling.",
		promtext.ExponentialBuckets(0.001, 4, 10), // 1 ms … 4.4 min
		"result")
	planApplyDuration = promtext.NewHistogramVec("berth_plan_apply_duration_seconds",
		"Time to commit one plan (or one part of a large plan) through raft and apply it, by result (ok, error).",
		promtext.ExponentialBuckets(0.0005, 4, 10), // 0.5 ms … 2.2 min
		"result")
)

// Metrics returns the collectors of the evaluation metrics, for the agent
// to register.
func Metrics() []promtext.Collector {
	return []promtext.Collector{evalDuration, planApplyDuration}
}

// markReadyLocked records when evalID became ready, unless it already is
// (parked behind its job, then handed on).
func (b *Broker) markReadyLocked(evalID string) {
	if _, ok := b.readySince[evalID]; !ok {
		b.readySince[evalID] = b.clock.Now()
	}
}

// observeLocked records evalID's latency to its ack or nack.
func (b *Broker) observeLocked(evalID, result string) {
	since, ok := b.readySince[evalID]
	if !ok {
		return
	}
	delete(b.readySince, evalID)
	evalDuration.WithLabelValues(result).Observe(b.clock.Now().Sub(since).Seconds())
}

func observePlanApply(start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	planApplyDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
}
