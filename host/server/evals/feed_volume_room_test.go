package evals

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// A job blocked on a single-writer volume is woken when the claim holding
// it is freed, not at each step of its release before: the holder's
// claim moving to releasing (in the very plan that stopped its alloc and
// blocked the next one) and to node-detached, and its attachment to
// detaching, leave the volume taken. Each of those woke the blocked job
// for a scheduler run and a plan that blocked again, raft writes beside
// the move's own (bench volmove).
func TestFeedWakesAVolumeBlockedJobOnlyWhenTheClaimIsFreed(t *testing.T) {
	f := fsm.New(testutil.Logger(t))
	var index uint64
	apply := func(mt fsm.MessageType, msg proto.Message) uint64 {
		t.Helper()
		buf, err := fsm.Encode(mt, msg)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.ApplyLog(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: buf}); res.Err != nil {
			t.Fatal(res.Err)
		}
		return index
	}
	changed := func() uint64 {
		t.Helper()
		at, err := volumesChangedAt(f.State().Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	snw, fsMode := pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
	apply(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Name: "n1", Status: pb.NodeStatus_NODE_STATUS_READY,
		Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}})
	apply(fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "n1",
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true, ControllerRequired: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"ebs": {Healthy: true}}})
	apply(fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 1, Volumes: map[string]*pb.VolumeRequest{"d": {Type: "csi", Source: "v1"}}}}}})
	apply(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: "v1", PluginId: "ebs",
		Capabilities: []*pb.VolumeCapability{{AccessMode: snw, AttachmentMode: fsMode}}}})
	apply(fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "web",
		Allocs: []*pb.Allocation{{Id: "a1", NodeId: "n1", JobId: "web", TaskGroup: "g", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
		Claims: []*pb.Claim{{Id: "c1", VolumeId: "v1", AllocId: "a1", Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: snw, AttachmentMode: fsMode}}}})
	apply(fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED,
		ControllerNodeId: "n1", CsiNodeId: "n1"})
	apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeId: "n1"}}})

	// The plan that stops a1 (its claim releasing) blocks the next alloc
	// at the snapshot before it.
	since := index
	steps := []struct {
		name string
		typ  fsm.MessageType
		cmd  proto.Message
	}{
		{"releasing", fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e2", JobId: "web", Stops: []*pb.AllocStop{{AllocId: "a1"}}}}},
		{"node-detached", fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1",
			State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: "n1"}}}},
	}
	for _, s := range steps {
		at := apply(s.typ, s.cmd)
		if got := changed(); got > since {
			t.Fatalf("claim %s at %d: volumes changed at %d, after the blocked evaluation's snapshot %d: it would be woken with the volume still taken",
				s.name, at, got, since)
		}
	}
	freed := apply(fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1",
		State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED, ControllerNodeId: "n1"})
	if c, _ := f.State().ClaimByID(nil, "c1"); c != nil {
		t.Fatalf("claim %v after the detach, want it freed", c)
	}
	if got := changed(); got != freed {
		t.Fatalf("the claim freed at %d: volumes changed at %d, want %d", freed, got, freed)
	}
}
