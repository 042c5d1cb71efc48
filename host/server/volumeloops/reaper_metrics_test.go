package volumeloops

import (
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/rpc/pb"
)

// The reaper counts the claims its write moved, not those it proposed: a
// claim its node reported detached just before the forced write lands
// (the node back long enough to report it) is not the reaper's doing.
func TestReaperCountsTheClaimsItsWriteMoved(t *testing.T) {
	forced := loopsMetric(t, "berth_volume_reaper_force_detached_claims_total", nil)
	synctest.Test(t, func(t *testing.T) {
		e := newEBSEnv(t)
		fake := volumetest.NewController()
		stop := attachedAndReleasing(t, e, fake)
		defer stop()
		reported := false
		e.setFailWrite(func(typ fsm.MessageType, msg proto.Message) error {
			cmd, ok := msg.(*pb.ClaimUpdateCommand)
			if !ok || reported || len(cmd.GetTransitions()) == 0 || !cmd.GetTransitions()[0].GetForce() {
				return nil
			}
			reported = true
			_, err := e.applyLocked(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{
				{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: "n2"}}, UpdatedAt: time.Now().UnixNano()})
			return err
		})
		time.Sleep(DefaultForceDetachAfter)
		synctest.Wait()
		if !reported {
			t.Fatal("the reaper proposed no forced detach")
		}
		if c := e.claim("c1"); c != nil {
			t.Fatalf("claim after force_detach_after: %v, want freed", c)
		}
	})
	if got := loopsMetric(t, "berth_volume_reaper_force_detached_claims_total", nil) - forced; got != 0 {
		t.Errorf("forced claims grew by %v, want 0: the node's own report moved the claim", got)
	}
}
