package fsm_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestBatchVolumeDeletingMatchesOneByOne: the deleting mark's refusals
// read the claims written earlier in the raft batch (marking a claimed
// volume) and the mark written earlier (claims, a register), in a batch
// as one by one, and none is refused after writing.
func TestBatchVolumeDeletingMatchesOneByOne(t *testing.T) {
	opClaim := func(id string) *pb.OperatorClaimCommand {
		return &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: id, VolumeId: "v2", NodeId: "n1",
			Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: snw, AttachmentMode: fs}}
	}
	entries := []struct {
		typ  fsm.MessageType
		msg  proto.Message
		want error
	}{
		{fsm.OperatorClaim, opClaim("op1"), nil},
		{fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "v2", Deleting: true}, fsm.ErrVolumeInUse},
		{fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "op1"}, nil},
		{fsm.ClaimUpdate, transition("op1", pb.ClaimState_CLAIM_STATE_NODE_DETACHED, "n1"), nil},
		{fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "v2", Deleting: true}, nil},
		{fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "v2", Deleting: true}, nil},
		{fsm.PlanApply, claimPlan("a1", "n1", "c1", "v2"), nil},
		{fsm.OperatorClaim, opClaim("op2"), fsm.ErrVolumeDeleting},
		{fsm.VolumeRegister, volumeCmd("v2", "nfs"), fsm.ErrVolumeDeleting},
		{fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "ghost", Deleting: true}, fsm.ErrVolumeNotFound},
		{fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "v2"}, nil},
		{fsm.OperatorClaim, opClaim("op3"), nil},
	}
	logs := make([]*raft.Log, len(entries))
	for i, e := range entries {
		logs[i] = &raft.Log{Index: uint64(10 + i), Term: 1, Type: raft.LogCommand, Data: mustEncode(t, e.typ, e.msg)}
	}
	var batchLogs, singleLogs bytes.Buffer
	batched, single := claimsSeeded(t, &batchLogs), claimsSeeded(t, &singleLogs)
	got := batched.ApplyBatch(logs)
	for i, e := range entries {
		w, g := single.ApplyLog(logs[i]), got[i].(*fsm.ApplyResult)
		if !errors.Is(w.Err, e.want) || (e.want == nil) != (w.Err == nil) {
			t.Errorf("entry %d (%s) alone: %v, want %v", i, e.typ, w.Err, e.want)
		}
		if (g.Err == nil) != (w.Err == nil) || (g.Err != nil && g.Err.Error() != w.Err.Error()) {
			t.Errorf("entry %d (%s): batch answered %v, one by one %v", i, e.typ, g.Err, w.Err)
		}
		if !proto.Equal(g.Response, w.Response) {
			t.Errorf("entry %d (%s): batch response %v, one by one %v", i, e.typ, g.Response, w.Response)
		}
	}
	for _, i := range []int{1, 7} {
		if err := got[i].(*fsm.ApplyResult).Err; err == nil || !strings.Contains(err.Error(), `volume "v2"`) {
			t.Errorf("entry %d's refusal %v does not name volume v2", i, err)
		}
	}
	plan := got[6].(*fsm.ApplyResult).Response.(*pb.PlanResult)
	if reason := plan.GetRefusals()["n1"]; plan.GetAppliedAllocs() != 0 || !strings.Contains(reason, `volume "v2"`) || !strings.Contains(reason, "being deleted") {
		t.Errorf("a plan claiming a volume being deleted: %v, want n1 refused naming volume v2", plan)
	}
	if want, gotState := mustDump(t, single.State()), mustDump(t, batched.State()); gotState != want {
		t.Errorf("state after ApplyBatch:\n%s\nafter one by one:\n%s", gotState, want)
	}
	if strings.Contains(batchLogs.String(), "failed after writing") {
		t.Errorf("a command was refused after writing, so the batch redid itself:\n%s", batchLogs.String())
	}
	if c, _ := batched.State().ClaimByID(nil, "op3"); c == nil {
		t.Errorf("op3, claimed after the mark was cleared, is not stored")
	}
}
