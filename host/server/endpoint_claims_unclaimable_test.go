package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// An operator claim that could only wait is refused, naming the volume
// and its plugin: the plugin needs a controller publish and no controller
// is healthy; the plugin has no healthy node instance (not schedulable);
// no node runs the plugin at all. Nothing is stored. When the controller
// is healthy again the same claim is reserved.
func TestOperatorClaimRefusesAVolumeItCouldOnlyWaitFor(t *testing.T) {
	cc := newClaimCluster(t, 1, true)
	cc.volume(t, "data", snw)
	n1 := cc.n1.GetId()
	csiClient := pb.NewCSIPluginsClient(cc.tc.conn(cc.s))
	controller := func(healthy bool) {
		updateCSI(t, csiClient, &pb.NodeCSIUpdateRequest{NodeId: n1,
			Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true}},
			Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: healthy, HealthDescription: "probe: connection refused",
				ControllerRequired: true, ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true}}}})
	}

	controller(false)
	_, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	wantCode(t, "no healthy controller", err, codes.FailedPrecondition,
		`volume "data"`, `csi plugin "hp" requires a controller publish and none of its controllers is healthy (0 of 1)`)
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: n1})
	wantCode(t, "no healthy controller, node named", err, codes.FailedPrecondition, `volume "data"`, `csi plugin "hp"`)

	// No healthy node instance anywhere (n2's was unhealthy from the start).
	// The controller stays healthy, so not being schedulable is the reason.
	updateCSI(t, csiClient, &pb.NodeCSIUpdateRequest{NodeId: n1,
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: false, HealthDescription: "probe: not ready"}},
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true}}}})
	cc.volume(t, "plain", snw)
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "plain"})
	wantCode(t, "not schedulable", err, codes.FailedPrecondition,
		`volume "plain"`, `csi plugin "hp" is not schedulable (0 of 2 node instances healthy)`)

	ghost := &pb.Volume{Id: "ghost", PluginId: "nowhere", Capabilities: []*pb.VolumeCapability{{AccessMode: snw,
		AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
	if _, err := cc.s.raftApply(ctx10s(t), fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: ghost}); err != nil {
		t.Fatal(err)
	}
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "ghost"})
	wantCode(t, "no plugin", err, codes.FailedPrecondition, `volume "ghost"`, `no node runs its csi plugin "nowhere"`)

	for _, v := range []string{"data", "plain", "ghost"} {
		if c, _ := cc.s.fsm.State().ClaimsByVolume(nil, v); len(c) != 0 {
			t.Fatalf("refused claims of %s were stored: %v", v, c)
		}
	}

	controller(true)
	resp, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	if err != nil || resp.GetClaim().GetState() != pb.ClaimState_CLAIM_STATE_RESERVED {
		t.Fatalf("with a healthy controller: %v, %v; want a reserved claim", resp, err)
	}
}

// A node whose attachment of the volume is detaching cannot take a claim
// of it (the state machine would refuse): named, it is refused with that
// reason; unnamed, the node choice says so for it.
func TestOperatorClaimSkipsANodeTheVolumeIsDetachingFrom(t *testing.T) {
	cc := newClaimCluster(t, 1, true)
	cc.volume(t, "data", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_MULTI_NODE_MULTI_WRITER)
	n1 := cc.n1.GetId()
	resp, err := cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: n1})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetClaim().GetId()
	for _, st := range []struct {
		typ fsm.MessageType
		cmd proto.Message
	}{
		{fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "data", NodeId: n1, State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED}},
		{fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: id}},
		{fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: id,
			State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: n1}}}},
	} {
		if _, err := cc.s.raftApply(ctx10s(t), st.typ, st.cmd); err != nil {
			t.Fatalf("%s: %v", st.typ, err)
		}
	}
	if a, _ := cc.s.fsm.State().Attachment(nil, "data", n1); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
		t.Fatalf("attachment %v, want detaching", a)
	}
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data", NodeId: n1})
	wantCode(t, "node named", err, codes.FailedPrecondition, `volume "data"`, n1, `volume "data" is detaching from it`)
	_, err = cc.claims.Claim(ctx10s(t), &pb.ClaimCreateRequest{VolumeId: "data"})
	wantCode(t, "node chosen", err, codes.FailedPrecondition, "no node can take", n1+` (n1): volume "data" is detaching from it`)
}
