package server

import (
	"fmt"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// The leader's attach reconciler with the server's real forwarder: publish and
// unpublish reach a fake plugin over the node's tunnel, and their outcomes
// land in the state.
func TestAttachAndDetachThroughTheRealForwarder(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	n1, n2 := testNode("n1"), testNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	p := csifake.New()
	p.ControllerPublishVolume.Always(&csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{"dev": "/dev/xvdf"}}, nil)
	connectCSINode(t, n1.GetId(), "ebs", p, s)
	vc := &volCluster{testCluster: tc, n1: n1, n2: n2}
	vc.apply(fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: n1.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSController(true)}, Nodes: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSNode("n1")}})
	vc.apply(fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: n2.GetId(), Nodes: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSNode("n2")}})
	vc.apply(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{
		Id: "v1", Name: "v1", PluginId: "ebs", ExternalId: "ext-v1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
	}})
	vc.claimOnN2()
	testutil.WaitFor(t, 15*time.Second, func() error {
		a, _ := s.State().Attachment(nil, "v1", n2.GetId())
		if a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED || a.GetPublishContext()["dev"] != "/dev/xvdf" {
			return fmt.Errorf("attachment %v", a)
		}
		return nil
	})
	if r := p.ControllerPublishVolume.Last(); r.GetVolumeId() != "ext-v1" || r.GetNodeId() != "csi-n2" {
		t.Fatalf("the plugin got %v", r)
	}
	// Release, detach as the client would: unpublish through the forwarder.
	vc.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
	vc.apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c1", State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: n2.GetId()}}})
	testutil.WaitFor(t, 15*time.Second, func() error {
		if a, _ := s.State().Attachment(nil, "v1", n2.GetId()); a != nil {
			return fmt.Errorf("attachment %v", a)
		}
		return nil
	})
	if r := p.ControllerUnpublishVolume.Last(); r.GetVolumeId() != "ext-v1" || r.GetNodeId() != "csi-n2" {
		t.Fatalf("the plugin got unpublish %v", r)
	}
}

// A volume write sent to a follower is forwarded to the leader, whose CSI
// call must still reach the node through the third server holding the
// node's tunnel: the forwarded mark of the request the leader serves is
// not the mark of its own call (the one-hop rule would refuse the relay).
func TestVolumeCreateOnAFollowerReachesANodeTunnelledToAnotherServer(t *testing.T) {
	tc := newTestCluster(t, 3, withVersion(version.Version))
	leader := tc.waitLeader()
	followers := tc.followers(leader)
	holder, asked := followers[0], followers[1]
	n := testNode("n1")
	if _, err := tc.register(leader, n); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, pb.NewCSIPluginsClient(tc.conn(leader)), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true, ControllerRequired: true,
			ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true}}},
		Nodes: map[string]*pb.CSIPluginInfo{"hp": {Healthy: true}},
	})
	p := csifake.New()
	p.CreateVolume.Always(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-data", CapacityBytes: 1 << 20}}, nil)
	connectCSINode(t, n.GetId(), "hp", p, holder)
	// The node's instance is on the followers' and the leader's books
	// before the call: wait until asked sees the plugin.
	testutil.WaitFor(t, 10*time.Second, func() error {
		pl, err := asked.State().CSIPluginByID(nil, "hp")
		if err != nil || pl == nil {
			return fmt.Errorf("plugin hp not on %s yet (%v)", asked.cfg.Name, err)
		}
		return nil
	})
	v := fsVolume("data")
	v.ExternalId = ""
	v.RequestedCapacityMinBytes = 1 << 20
	var err error
	testutil.WaitFor(t, 10*time.Second, func() error {
		// Unavailable only while the holder's tunnel is not yet known.
		_, err = pb.NewVolumesClient(tc.conn(asked)).Create(ctx10s(t), &pb.VolumeCreateRequest{Volume: v})
		if status.Code(err) == codes.Unavailable {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("volume create on follower %s (leader %s, tunnel on %s): %v", asked.cfg.Name, leader.cfg.Name, holder.cfg.Name, err)
	}
	if got := p.CreateVolume.Count(); got != 1 {
		t.Fatalf("the plugin got %d CreateVolume calls, want 1", got)
	}
}
