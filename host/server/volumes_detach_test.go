package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// detachingCluster is one server with one work node n1 running the
// "hostpath" plugin as a controller that requires a publish and as a node
// instance, and a multi-node-multi-writer volume "vol1" whose attachment
// to n1 is detaching: an operator claimed it, it was attached, the claim
// was released and reported node-detached. No attach reconciler runs, so
// the attachment stays detaching until the test removes it. It returns
// n1's ID.
func detachingCluster(t *testing.T) (*testCluster, *Server, string) {
	t.Helper()
	tc := newTestCluster(t, 1, withVersion(version.Version), func(c *testConfig) { c.NumSchedulers = 1; c.noControllerCalls = true })
	s := tc.servers[0]
	n := workNode("n1")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	n1 := n.GetId()
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(s)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true}},
		Controllers: map[string]*pb.CSIPluginInfo{"hostpath": {Healthy: true, ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true}}},
	})
	mnmw := pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER
	fs := pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM
	vol := &pb.Volume{Id: "vol1", Name: "vol1", PluginId: "hostpath", ExternalId: "ext-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: mnmw, AttachmentMode: fs}}}
	for _, st := range []struct {
		what string
		typ  fsm.MessageType
		cmd  proto.Message
	}{
		{"register vol1", fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: vol, RegisteredAt: 1}},
		{"operator claim", fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: "op1", VolumeId: "vol1", NodeId: n1,
			Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: mnmw, AttachmentMode: fs}, CreatedAt: 2}},
		{"attached", fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "vol1", NodeId: n1,
			State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, UpdatedAt: 3}},
		{"release", fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "op1", UpdatedAt: 4}},
		{"node-detached", fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "op1",
			State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: n1}}, UpdatedAt: 5}},
	} {
		if _, err := s.raftApply(ctx10s(t), st.typ, st.cmd); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
	}
	if a, _ := s.State().Attachment(nil, "vol1", n1); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		t.Fatalf("attachment %v, want detaching", a)
	}
	return tc, s, n1
}

// TestJobBlockedOnADetachingAttachmentWakesWithIt: a job whose only node's
// attachment of its volume is detaching blocks with that reason; a change
// to the attachment that leaves it detaching (a failed unpublish
// recorded) gives no room and does not move the index the feed wakes it
// by (fsm's VolumeRoomIndex; it used to wake the job for a scheduler run
// and a plan that blocked again); the attachment's removal places it,
// with a new attachment attaching for its claim.
func TestJobBlockedOnADetachingAttachmentWakesWithIt(t *testing.T) {
	tc, s, n1 := detachingCluster(t)
	if _, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: volumeJob("db", 1)}); err != nil {
		t.Fatal(err)
	}
	const reason = `volume "vol1" (group volume "data"): the volume is detaching from the node`
	first := blockedOn(t, s, "db", 0, reason)

	failed, err := s.raftApply(ctx10s(t), fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "vol1", NodeId: n1,
		State: pb.AttachmentState_ATTACHMENT_STATE_DETACHING, Attempts: 1, UpdatedAt: 6,
		Error: &pb.VolumeError{Message: "ControllerUnpublishVolume: deadline exceeded"}})
	if err != nil {
		t.Fatalf("recording a failed unpublish: %v", err)
	}
	if first.GetSnapshotIndex() >= failed {
		t.Fatalf("blocked eval planned at %d, after the attachment changed at %d", first.GetSnapshotIndex(), failed)
	}
	if room, err := s.State().VolumeRoomIndex(nil); err != nil || room >= failed || room > first.GetSnapshotIndex() {
		t.Fatalf("volume room at %d (%v) after the failed unpublish at %d: the blocked eval planned at %d would be woken with the volume still detaching",
			room, err, failed, first.GetSnapshotIndex())
	}
	if got := liveAllocs(t, tc, s, "db"); len(got) != 0 {
		t.Fatalf("db placed %v while vol1 detaches from n1", got)
	}

	if _, err := s.raftApply(ctx10s(t), fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "vol1", NodeId: n1,
		State: pb.AttachmentState_ATTACHMENT_STATE_DETACHED, UpdatedAt: 7}); err != nil {
		t.Fatalf("removing the attachment: %v", err)
	}
	a := waitAllocs(t, tc, s, "db", 1, nil)[0]
	cs, err := s.State().ClaimsByAlloc(nil, a.GetId())
	if err != nil || len(cs) != 1 || cs[0].GetState() != pb.ClaimState_CLAIM_STATE_RESERVED {
		t.Fatalf("db's alloc holds claims %v (%v), want one reserved on vol1", cs, err)
	}
	if att, _ := s.State().Attachment(nil, "vol1", n1); att.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING {
		t.Fatalf("attachment %v, want a new one attaching for db's claim", att)
	}
}
