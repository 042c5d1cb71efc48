package volumeloops

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"berth.dev/berth/csi"
)

// The leader's volume loops' metrics. Labels are bounded: the step and its
// result; no volume or node ID.
var (
	controllerOpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_volume_controller_operation_duration_seconds",
		Help: "Duration of the attach reconciler's controller calls, through the node serving the controller: " +
			"attach (ControllerPublishVolume) and detach (ControllerUnpublishVolume, NotFound counting as done), by result (ok, error).",
		Buckets: csi.DurationBuckets(),
	}, []string{"operation", "result"})
	forceDetached = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_volume_reaper_force_detached_claims_total",
		Help: "Claims the reaper forced to node-detached because their node was down past force_detach_after, fenced or gone: " +
			"those its writes moved, as their applies answer (a claim its node reported detached first is not counted).",
	})
)

// Metrics returns the collectors of the volume loops' metrics, for the
// agent to register.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{controllerOpDuration, forceDetached}
}

func observeControllerOp(op string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	controllerOpDuration.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}
