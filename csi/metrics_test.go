package csi_test

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/testutil"
)

// Every call is timed by method and code; a failure counts as an error,
// a NotFound answered to an undo (done, by the call table) does not.
func TestCallMetrics(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	value := func(name, method, code string) float64 {
		return testutil.MetricValue(t, name, map[string]string{"method": method, "code": code}, csi.Metrics()...)
	}
	const dur, errs = "berth_csi_call_duration_seconds", "berth_csi_call_errors_total"
	okBefore := value(dur, "NodeStageVolume", "OK")
	internalBefore, internalErrBefore := value(dur, "NodeStageVolume", "Internal"), value(errs, "NodeStageVolume", "Internal")
	notFoundBefore, notFoundErrBefore := value(dur, "NodeUnstageVolume", "NotFound"), value(errs, "NodeUnstageVolume", "NotFound")

	stage := &csipb.NodeStageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/staging", VolumeCapability: mountCap("ext4", csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}
	if _, err := c.Node.NodeStageVolume(ctx, stage); err != nil {
		t.Fatal(err)
	}
	p.NodeStageVolume.Next(nil, status.Error(codes.Internal, "disk on fire"))
	if _, err := c.Node.NodeStageVolume(ctx, stage); err == nil {
		t.Fatal("stage answered Internal succeeded")
	}
	p.NodeUnstageVolume.Next(nil, status.Error(codes.NotFound, "not staged"))
	if _, err := c.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: "v1", StagingTargetPath: "/staging"}); err != nil {
		t.Fatalf("unstage of a volume not staged: %v", err)
	}

	for _, tc := range []struct {
		name, method, code string
		before, want       float64
	}{
		{dur, "NodeStageVolume", "OK", okBefore, 1},
		{dur, "NodeStageVolume", "Internal", internalBefore, 1},
		{errs, "NodeStageVolume", "Internal", internalErrBefore, 1},
		{dur, "NodeUnstageVolume", "NotFound", notFoundBefore, 1},
		{errs, "NodeUnstageVolume", "NotFound", notFoundErrBefore, 0},
	} {
		if got := value(tc.name, tc.method, tc.code) - tc.before; got != tc.want {
			t.Errorf("%s{method=%q,code=%q} grew by %v, want %v", tc.name, tc.method, tc.code, got, tc.want)
		}
	}
}

// A client made WithoutCallMetrics (a server's, through a node) adds no
// samples: the node observes the call.
func TestCallMetricsLeftOut(t *testing.T) {
	_, _, c := startFake(t, csi.WithoutCallMetrics())
	labels := map[string]string{"method": "Probe", "code": "OK"}
	before := testutil.MetricValue(t, "berth_csi_call_duration_seconds", labels, csi.Metrics()...)
	if _, err := c.Identity.Probe(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.MetricValue(t, "berth_csi_call_duration_seconds", labels, csi.Metrics()...) - before; got != 0 {
		t.Errorf("probe samples grew by %v, want 0", got)
	}
}
