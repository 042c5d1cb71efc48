package volumemanager

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
)

// Each node step is timed once, retries included, by step and result.
func TestNodeOperationMetrics(t *testing.T) {
	h := newHarness(t)
	m := h.manager(t)
	value := func(op, result string) float64 {
		return testutil.MetricValue(t, "berth_volume_node_operation_duration_seconds", map[string]string{"operation": op, "result": result}, Metrics()...)
	}
	before := map[string]float64{}
	for _, op := range []string{"stage", "publish", "unpublish", "unstage"} {
		before[op] = value(op, "ok")
	}
	stageErr := value("stage", "error")

	// An uncertain answer is retried within the step: still one sample.
	h.plugin.NodeStageVolume.Next(nil, status.Error(codes.Unavailable, "busy"))
	if _, err := m.Publish(context.Background(), request("v1", "a1")); err != nil {
		t.Fatal(err)
	}
	if err := m.Unpublish(context.Background(), "a1", "v1", nil); err != nil {
		t.Fatal(err)
	}
	for op, b := range before {
		if got := value(op, "ok") - b; got != 1 {
			t.Errorf("%s samples grew by %v, want 1", op, got)
		}
	}
	h.plugin.NodeStageVolume.Next(nil, status.Error(codes.Internal, "no"))
	if _, err := m.Publish(context.Background(), request("v2", "a2")); err == nil {
		t.Fatal("publish with a failing stage succeeded")
	}
	if got := value("stage", "error") - stageErr; got != 1 {
		t.Errorf("failed stage samples grew by %v, want 1", got)
	}
}
