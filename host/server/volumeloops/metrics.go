package volumeloops

import (
	"time"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/promtext"
)

// The leader's volume loops' metrics. Labels are bounded: the step and its
// result; no volume or node ID.
var (
	controllerOpDuration = promtext.NewHistogramVec("berth_volume_controller_operation_duration_seconds",
		"Duration of the attach reconciler's controller calls, through the node serving the controller: "+
			"attach (ControllerPublishVolume) and detach (ControllerUnpublishVolume, NotFound counting as done), by result (ok, error).",
		csi.DurationBuckets(),
		"operation", "result")
	forceDetached = promtext.NewCounter("berth_volume_reaper_force_detached_claims_total",
		"Claims the reaper forced to node-detached because their node was down past force_detach_after, fenced or gone: "+
			"those its writes moved, as their applies answer (a claim its node reported detached first is not counted).")
)

// Metrics returns the collectors of the volume loops' metrics, for the
// agent to register.
func Metrics() []promtext.Collector {
	return []promtext.Collector{controllerOpDuration, forceDetached}
}

func observeControllerOp(op string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	controllerOpDuration.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}
