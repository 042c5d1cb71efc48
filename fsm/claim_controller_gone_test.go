package fsm_test

import (
	"bytes"
	"testing"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// csi_plugins' controller_required is recomputed from
// the instances present ("when any instance says so"). In a split
// deployment the node instances do not report it (no controller service
// there), so while the controller instance is gone (its task stopped for
// a job update, its node deregistered) the row says controller_required
// false and schedulable true (healthy node instances), the volume's mirror
// follows, and a new claim of an ebs volume is reserved straight to ready
// with no attachment: the node stages a disk that was never
// ControllerPublished, and its release skips the unpublish.
func TestClaimSkipsControllerPublishWhileTheControllerIsGone(t *testing.T) {
	var logs bytes.Buffer
	f := claimsSeeded(t, &logs)
	// n1's controller task stops; its node instance stays.
	applyOK(t, f, 7, fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "n1",
		Nodes: map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true}}})
	v, err := f.State().VolumeByID(nil, "v1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("v1 after the controller left: controller_required=%v schedulable=%v", v.GetControllerRequired(), v.GetSchedulable())
	applyOK(t, f, 8, fsm.PlanApply, claimPlan("a1", "n1", "c1", "v1"))
	c, err := f.State().ClaimByID(nil, "c1")
	if err != nil || c == nil {
		t.Fatalf("claim c1: %v, %v", c, err)
	}
	a, _ := f.State().Attachment(nil, "v1", "n1")
	if c.GetState() == pb.ClaimState_CLAIM_STATE_READY && a == nil {
		t.Errorf("claim c1 of ebs volume v1 is ready on n1 with no attachment: it skipped the controller publish its plugin requires")
	}
}
