package csi

import (
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/promtext"
)

// durationBuckets are the buckets of berth's storage latency histograms, in
// seconds: a local plugin answers in milliseconds, a cloud attach takes
// tens of seconds, a create or delete up to the five-minute deadline.
var durationBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// DurationBuckets returns a copy of the storage histograms' buckets, for
// the other packages that time storage steps.
func DurationBuckets() []float64 { return append([]float64(nil), durationBuckets...) }

// Every call a Client makes is observed here (invoke, and Invoke for the
// calls servers forward: every call goes through one of the two), by
// method (the call table's name) and gRPC code: bounded labels.
var (
	callDuration = promtext.NewHistogramVec("berth_csi_call_duration_seconds",
		"Latency of CSI calls this agent made to plugins, by method and gRPC code (one try each; csi.Retry's retries are separate calls).",
		durationBuckets,
		"method", "code")
	callErrors = promtext.NewCounterVec("berth_csi_call_errors_total",
		"CSI calls that failed, by method and gRPC code (NotFound answered to an undo, which counts as done, is not an error).",
		"method", "code")
)

// WithoutCallMetrics leaves the client's calls out of the call metrics: for
// a client whose calls reach the plugin through another agent (a server's
// calls through a node), which observes them where they are made, so a
// call is counted once even when both run in one process (a dev agent).
func WithoutCallMetrics() Option {
	return func(c *caller) { c.noMetrics = true }
}

// Metrics returns the collectors of the CSI client's metrics, for the
// agent to register.
func Metrics() []promtext.Collector {
	return []promtext.Collector{callDuration, callErrors}
}

// observeCall records one call's outcome; failed says whether the caller
// got an error.
func (c *caller) observeCall(call Call, code codes.Code, start time.Time, failed bool) {
	if c.noMetrics {
		return
	}
	callDuration.WithLabelValues(string(call), code.String()).Observe(time.Since(start).Seconds())
	if failed {
		callErrors.WithLabelValues(string(call), code.String()).Inc()
	}
}
