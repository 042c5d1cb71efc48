package fsm_test

import (
	"bytes"
	"testing"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestVolumeRoomIndexMovesOnlyWhenAClaimOrAttachmentIsRemoved walks a
// claim of a volume needing a controller publish through its life: the
// reservation, attached, in use, releasing (its alloc stopped),
// node-detached (the attachment then detaching) write the claims and
// attachments tables but give no other job room, and neither move
// VolumeRoomIndex nor fire its watch; the detach that removes the
// attachment and frees the claim moves it to its index. Before, the
// blocked-evaluation feed read the two tables' indexes and woke a job
// blocked on the volume at each of those steps, for a scheduler run and
// a plan that blocked again. A restore, which cannot tell when rows were
// removed, counts the tables' last change.
func TestVolumeRoomIndexMovesOnlyWhenAClaimOrAttachmentIsRemoved(t *testing.T) {
	var logs bytes.Buffer
	f := claimsSeeded(t, &logs)
	st := f.State()
	room := func() uint64 {
		t.Helper()
		idx, err := st.VolumeRoomIndex(nil)
		if err != nil {
			t.Fatal(err)
		}
		return idx
	}
	ws := memdb.NewWatchSet()
	if _, err := st.VolumeRoomIndex(ws); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		typ  fsm.MessageType
		cmd  proto.Message
	}{
		{"reserved", fsm.PlanApply, claimPlan("a1", "n1", "c1", "v1")},
		{"attached", fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED,
			ControllerNodeId: "n1", CsiNodeId: "n1"}},
		{"in use", fsm.ClaimUpdate, transition("c1", pb.ClaimState_CLAIM_STATE_IN_USE, "n1")},
		{"releasing", fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e2", JobId: "web", Stops: []*pb.AllocStop{{AllocId: "a1"}}}}},
		{"node-detached", fsm.ClaimUpdate, transition("c1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, "n1")},
	}
	index := uint64(10)
	for _, s := range steps {
		index++
		applyOK(t, f, index, s.typ, s.cmd)
		if got := room(); got != 0 || fired(ws) {
			t.Fatalf("after %s at %d: volume room at %d (want 0), watch fired %v (want false)", s.name, index, got, fired(ws))
		}
	}
	if a, _ := st.Attachment(nil, "v1", "n1"); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		t.Fatalf("attachment %v after the node-detached report, want detaching", a)
	}
	index++
	applyOK(t, f, index, fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1",
		State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED, ControllerNodeId: "n1"})
	if c, _ := st.ClaimByID(nil, "c1"); c != nil {
		t.Fatalf("claim %v after the detach, want it freed", c)
	}
	if got := room(); got != index || !fired(ws) {
		t.Fatalf("after the detach at %d freed the claim: volume room at %d, watch fired %v", index, got, fired(ws))
	}

	g := fsm.New(testLogger(t))
	if err := restoreBytes(g, snapshotBytes(t, f)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	claimsAt, _ := st.Index(fsm.TableClaims)
	attachmentsAt, _ := st.Index(fsm.TableAttachments)
	if got, err := g.State().VolumeRoomIndex(nil); err != nil || got != max(claimsAt, attachmentsAt) {
		t.Fatalf("restored: volume room at %d (%v), want the tables' last change %d", got, err, max(claimsAt, attachmentsAt))
	}
}
