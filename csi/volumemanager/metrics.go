package volumemanager

import (
	"time"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/promtext"
)

// opDuration times each node step of a volume (m.call: every stage,
// publish, unpublish, unstage and node expansion goes through it), retries
// and the wait for the node plugin included: how long a use waited for the
// step, where berth_csi_call_duration_seconds times each try. Labels are
// the step and its result, both bounded.
var opDuration = promtext.NewHistogramVec("berth_volume_node_operation_duration_seconds",
	"Duration of a volume's node steps (stage, publish, unpublish, unstage, expand), retries and the wait for the node plugin included, by step and result (ok, error).",
	csi.DurationBuckets(),
	"operation", "result")

// Metrics returns the collectors of the volume manager's metrics, for the
// agent to register.
func Metrics() []promtext.Collector { return []promtext.Collector{opDuration} }

// operations names the steps by their call.
var operations = map[csi.Call]string{
	csi.CallNodeStageVolume:     "stage",
	csi.CallNodePublishVolume:   "publish",
	csi.CallNodeUnpublishVolume: "unpublish",
	csi.CallNodeUnstageVolume:   "unstage",
	csi.CallNodeExpandVolume:    "expand",
}

func observeOp(c csi.Call, start time.Time, err error) {
	op, ok := operations[c]
	if !ok {
		op = string(c)
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	opDuration.WithLabelValues(op, result).Observe(time.Since(start).Seconds())
}
