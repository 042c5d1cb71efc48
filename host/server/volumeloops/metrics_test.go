package volumeloops

import (
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func loopsMetric(t *testing.T, name string, labels map[string]string) float64 {
	return testutil.MetricValue(t, name, labels, Metrics()...)
}

// The attach and the detach are timed by result, a failed try included,
// and the reaper counts the claims it forces.
func TestLoopsMetrics(t *testing.T) {
	const dur = "berth_volume_controller_operation_duration_seconds"
	labels := func(op, result string) map[string]string { return map[string]string{"operation": op, "result": result} }
	attachOK, attachErr := loopsMetric(t, dur, labels("attach", "ok")), loopsMetric(t, dur, labels("attach", "error"))
	detachOK := loopsMetric(t, dur, labels("detach", "ok"))
	forced := loopsMetric(t, "berth_volume_reaper_force_detached_claims_total", nil)

	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		fake.FailNext(volumetest.PublishMethod, codes.Unavailable)
		stop := start(e.loops(fake))
		defer stop()
		synctest.Wait()
		time.Sleep(time.Minute) // past the failed try's backoff
		synctest.Wait()
		wantState(t, e.attachment("v1", "n2"), pb.AttachmentState_ATTACHMENT_STATE_ATTACHED)
		e.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n2", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: time.Now().UnixNano()})
		e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
		synctest.Wait()
		time.Sleep(DefaultForceDetachAfter)
		synctest.Wait()
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim after force_detach_after: %v, want freed", c)
		}
	})
	for _, tc := range []struct {
		what      string
		got, want float64
	}{
		{"attach ok", loopsMetric(t, dur, labels("attach", "ok")) - attachOK, 1},
		{"attach error", loopsMetric(t, dur, labels("attach", "error")) - attachErr, 1},
		{"detach ok", loopsMetric(t, dur, labels("detach", "ok")) - detachOK, 1},
		{"forced claims", loopsMetric(t, "berth_volume_reaper_force_detached_claims_total", nil) - forced, 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: grew by %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}
