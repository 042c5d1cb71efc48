package server

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// PlanApply refuses a claim on a node whose attachment
// of the volume is detaching (checkReservation: ErrAttachmentTransition),
// but the scheduler reads no attachments (scheduler.State has none), so it
// keeps choosing that node: the plan is refused maxPlanAttempts times per
// delivery, the evaluation fails after the broker's delivery limit, and
// the job waits for the failed evaluation's follow-up a minute later
// instead of blocking (or going to another node). With a single node the
// right outcome is a blocked evaluation woken when the attachment goes.
func TestSchedulerDoesNotSeeADetachingAttachment(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) { c.NumSchedulers = 1; c.noControllerCalls = true })
	s := tc.servers[0]
	n := workNode("n1")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true}},
		Controllers: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true, ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true}}},
	})
	vol := &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "hostpath", ExternalId: "ext-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
	steps := []struct {
		what string
		typ  fsm.MessageType
		cmd  proto.Message
	}{
		{"register vol1", fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: vol, RegisteredAt: 1}},
		{"operator claim", fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: "op1", VolumeId: "vol1", NodeId: n.GetId(),
			Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}, CreatedAt: 2}},
		{"attached", fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "vol1", NodeId: n.GetId(),
			State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, UpdatedAt: 3}},
		{"release", fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "op1", UpdatedAt: 4}},
		{"node-detached", fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "op1",
			State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: n.GetId()}}, UpdatedAt: 5}},
	}
	for _, st := range steps {
		if _, err := s.raftApply(ctx10s(t), st.typ, st.cmd); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
	}
	if a, _ := s.State().Attachment(nil, "vol1", n.GetId()); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		t.Fatalf("attachment %v, want detaching (the unpublish is the reconciler's, not running here)", a)
	}
	if _, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("db", 1)}); err != nil {
		t.Fatal(err)
	}
	// The worker's own log shows the loop: "plan partly refused; planning
	// again ... the volume is detaching from the node" five times, then
	// "evaluation failed; handing it back" (nack; after the delivery limit
	// the evaluation fails, its follow-up waits a minute).
	blocked := false
	var last []string
	deadline := time.Now().Add(10 * time.Second)
	for !blocked && time.Now().Before(deadline) {
		evs, err := s.State().EvalsByJob(nil, "db")
		if err != nil {
			t.Fatal(err)
		}
		last = last[:0]
		for _, e := range evs {
			last = append(last, fmt.Sprintf("%s %s %q", e.GetId(), e.GetStatus(), e.GetStatusDescription()))
			blocked = blocked || e.GetStatus() == pb.EvalStatus_EVAL_STATUS_BLOCKED
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !blocked {
		t.Errorf("job db never got a blocked evaluation while vol1 detaches from its only node (evals: %v); its plan is refused "+
			"on the node again and again: the scheduler does not see the detaching attachment", last)
	}
}
