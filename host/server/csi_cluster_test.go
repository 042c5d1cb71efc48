package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// callerServerKey carries, in a controller call's context, the name of
// the server that made it.
type callerServerKey struct{}

// serverCaller is one server's controller caller: the cluster's shared
// fake, with the calling server's name in the context.
type serverCaller struct {
	server string
	f      *volumetest.Controller
}

func (c serverCaller) ControllerCall(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error {
	return c.f.ControllerCall(context.WithValue(ctx, callerServerKey{}, c.server), nodeID, pluginID, expect, method, req, resp)
}

// withController makes every server's controller calls go to f.
func withController(f *volumetest.Controller) clusterOpt {
	return func(c *testConfig) { c.controllerCaller = serverCaller{server: c.Name, f: f} }
}

func (tc *testCluster) byName(name string) *Server {
	for _, s := range tc.servers {
		if s.cfg.Name == name {
			return s
		}
	}
	tc.t.Fatalf("no server %q", name)
	return nil
}

// volCluster is a cluster whose leader's state holds what newEBSEnv
// holds, short of the claim: nodes n1 (the controller and a node
// instance) and n2 (a node instance), and volume v1.
type volCluster struct {
	*testCluster
	n1, n2 *pb.Node
}

func newVolCluster(t *testing.T, servers int, fake *volumetest.Controller) *volCluster {
	tc := newTestCluster(t, servers, withController(fake))
	vc := &volCluster{testCluster: tc, n1: testNode("n1"), n2: testNode("n2")}
	leader := tc.waitLeader()
	for _, n := range []*pb.Node{vc.n1, vc.n2} {
		if _, err := tc.register(leader, n); err != nil {
			t.Fatal(err)
		}
	}
	vc.apply(fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: vc.n1.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSController(true)}, Nodes: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSNode("n1")}})
	vc.apply(fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: vc.n2.GetId(), Nodes: map[string]*pb.CSIPluginInfo{"ebs": volumetest.EBSNode("n2")}})
	vc.apply(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{
		Id: "v1", Name: "v1", PluginId: "ebs", ExternalId: "ext-v1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
	}})
	return vc
}

// apply proposes a setup command through whichever server leads now.
func (vc *volCluster) apply(t fsm.MessageType, msg proto.Message) {
	vc.t.Helper()
	testutil.WaitFor(vc.t, 15*time.Second, func() error {
		_, err := vc.waitLeader().raftApply(ctx10s(vc.t), t, msg)
		return err
	})
}

func (vc *volCluster) claimOnN2() {
	vc.apply(fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{
		Id: "c1", VolumeId: "v1", NodeId: vc.n2.GetId(), Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
	}})
}

// waitAttachments waits until every live server's state holds exactly
// the attachments of v1 that check accepts.
func (vc *volCluster) waitAttachments(check func([]*pb.Attachment) error) {
	vc.t.Helper()
	testutil.WaitFor(vc.t, 15*time.Second, func() error {
		for _, s := range vc.live() {
			atts, err := s.State().AttachmentsByVolume(nil, "v1")
			if err != nil {
				return err
			}
			if err := check(atts); err != nil {
				return fmt.Errorf("%s: %w", s.cfg.Name, err)
			}
		}
		return nil
	})
}

func oneAttached(atts []*pb.Attachment) error {
	if len(atts) != 1 || atts[0].GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHED {
		return fmt.Errorf("attachments of v1: %v, want exactly one, attached", atts)
	}
	return nil
}

// TestClusterLeaderKilledBetweenPublishAndItsWrite: the leader's
// ControllerPublishVolume succeeds at the plugin, and the leader is lost
// before the outcome reaches raft: killed (its call's context ends, it
// writes nothing), or cut off from the other servers (it tries to write,
// and that write never commits; it rejoins as a follower afterwards). The
// new leader finds the attachment still attaching, publishes again (the
// call is idempotent), and every server converges on exactly one
// attachment, attached, with the claim ready, one node published at the
// plugin and nothing unpublished.
func TestClusterLeaderKilledBetweenPublishAndItsWrite(t *testing.T) {
	for _, mode := range []string{"killed", "partitioned"} {
		t.Run(mode, func(t *testing.T) {
			fake := volumetest.NewController()
			vc := newVolCluster(t, 3, fake)
			var lost atomic.Pointer[Server]
			fake.OnCall = func(ctx context.Context, c volumetest.Call) error {
				if c.Method != volumetest.PublishMethod || lost.Load() != nil {
					return nil
				}
				s := vc.byName(ctx.Value(callerServerKey{}).(string))
				if !lost.CompareAndSwap(nil, s) {
					return nil
				}
				// The plugin has published (the fake records it once this
				// returns); the leader is lost before it hears so.
				if mode == "killed" {
					go func() { _ = s.Shutdown() }()
					<-ctx.Done()
				} else {
					vc.partition(s)
				}
				return nil
			}
			vc.claimOnN2()
			testutil.WaitFor(t, 15*time.Second, func() error {
				if lost.Load() == nil {
					return errors.New("no publish yet")
				}
				return nil
			})
			old := lost.Load()
			vc.waitLeader(old)
			if mode == "partitioned" {
				// The new leader's publish is in before the old leader
				// comes back.
				testutil.WaitFor(t, 15*time.Second, func() error {
					if n := len(fake.CallsOf(volumetest.PublishMethod)); n < 2 {
						return fmt.Errorf("%d publishes, waiting for the new leader's", n)
					}
					return nil
				})
				vc.heal(old)
			}
			vc.waitAttachments(oneAttached)

			calls := fake.CallsOf(volumetest.PublishMethod)
			if len(calls) != 2 || !proto.Equal(calls[0].Req, calls[1].Req) || calls[0].Node != vc.n1.GetId() || calls[1].Node != vc.n1.GetId() {
				t.Fatalf("publishes = %s, want two equal ones through n1: the lost leader's and the new leader's", volumetest.DescribeCalls(calls))
			}
			if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
				t.Fatalf("%d unpublishes, want 0", n)
			}
			fake.Mu.Lock()
			published := fake.Published["ext-v1"]
			fake.Mu.Unlock()
			if len(published) != 1 || !published["csi-n2"] {
				t.Fatalf("the plugin has ext-v1 published to %v, want csi-n2 only", published)
			}
			for _, s := range vc.live() {
				a, err := s.State().Attachment(nil, "v1", vc.n2.GetId())
				if err != nil {
					t.Fatal(err)
				}
				if a.GetControllerNodeId() != vc.n1.GetId() || a.GetPublishContext()["lun"] != "3" || a.GetLastError() != nil {
					t.Fatalf("%s: attachment %v, want controller n1, publish context lun=3, no error", s.cfg.Name, a)
				}
				testutil.WaitFor(t, 10*time.Second, func() error {
					c, err := s.State().ClaimByID(nil, "c1")
					if err != nil {
						return err
					}
					if c.GetState() != pb.ClaimState_CLAIM_STATE_READY {
						return fmt.Errorf("%s: claim c1 is %s, want ready", s.cfg.Name, pb.EnumWord(c.GetState()))
					}
					return nil
				})
			}
		})
	}
}

// fence sends NodeOps.UpdateFence, waiting while the servers have not
// all recorded their versions yet (the table rule).
func (vc *volCluster) fence(req *pb.NodeFenceRequest) (*pb.NodeOpResponse, error) {
	var resp *pb.NodeOpResponse
	var err error
	testutil.WaitFor(vc.t, 10*time.Second, func() error {
		resp, err = pb.NewNodeOpsClient(vc.conn(vc.waitLeader())).UpdateFence(ctx10s(vc.t), req)
		if st, _ := status.FromError(err); st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), "record its version") {
			return err
		}
		return nil
	})
	return resp, err
}

// TestNodeFenceReleasesClaimsAndUnpublishes: n2 goes down with its claim
// releasing (its client will never report the unpublish). Fencing it
// detaches the claim in that apply; the leader unpublishes through the
// controller, removes the attachment and frees the claim, without
// waiting for force_detach_after. Lifting the fence records it.
func TestNodeFenceReleasesClaimsAndUnpublishes(t *testing.T) {
	fake := volumetest.NewController()
	vc := newVolCluster(t, 1, fake)
	vc.claimOnN2()
	vc.waitAttachments(oneAttached)
	n2 := vc.n2.GetId()
	vc.apply(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: n2, Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: vc.clock.Now().UnixNano()})
	vc.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c1"})
	s := vc.waitLeader()
	if c, _ := s.State().ClaimByID(nil, "c1"); c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
		t.Fatalf("claim c1 before the fence: %v, want releasing", c)
	}
	if n := len(fake.CallsOf(volumetest.UnpublishMethod)); n != 0 {
		t.Fatalf("%d unpublishes before the fence, want 0 (force_detach_after is 6m on a clock that stands still)", n)
	}

	if _, err := vc.fence(&pb.NodeFenceRequest{NodeId: n2}); err != nil {
		t.Fatalf("fence of down node n2: %v", err)
	}
	vc.waitAttachments(func(atts []*pb.Attachment) error {
		if len(atts) != 0 {
			return fmt.Errorf("attachments of v1 after the fence: %v, want none", atts)
		}
		return nil
	})
	if c, err := s.State().ClaimByID(nil, "c1"); err != nil || c != nil {
		t.Fatalf("claim c1 after the fence: %v (%v), want freed", c, err)
	}
	calls := fake.CallsOf(volumetest.UnpublishMethod)
	if len(calls) != 1 || calls[0].Node != vc.n1.GetId() {
		t.Fatalf("unpublishes = %s, want one through n1", volumetest.DescribeCalls(calls))
	}
	node, err := s.State().NodeByID(nil, n2)
	if err != nil || !node.GetFenced() || node.GetFencedAt() == 0 {
		t.Fatalf("node n2 after the fence: %v (%v), want fenced with its time", node, err)
	}

	// Fencing again changes nothing; unfencing lifts it.
	if _, err := vc.fence(&pb.NodeFenceRequest{NodeId: n2, Fenced: proto.Bool(true)}); err != nil {
		t.Fatalf("second fence: %v", err)
	}
	if _, err := vc.fence(&pb.NodeFenceRequest{NodeId: n2, Fenced: proto.Bool(false)}); err != nil {
		t.Fatalf("unfence: %v", err)
	}
	if node, _ := s.State().NodeByID(nil, n2); node.GetFenced() {
		t.Fatalf("node n2 after the unfence: %v, want not fenced", node)
	}
}

// TestNodeFenceRefusals: the refusals name the node and carry their code.
func TestNodeFenceRefusals(t *testing.T) {
	vc := newVolCluster(t, 1, volumetest.NewController())
	ready := vc.n1.GetId()
	unknown := testNode("x").GetId()
	for _, tt := range []struct {
		name string
		req  *pb.NodeFenceRequest
		code codes.Code
		msg  string
	}{
		{"unknown node", &pb.NodeFenceRequest{NodeId: unknown}, codes.NotFound, unknown},
		{"ready node", &pb.NodeFenceRequest{NodeId: ready}, codes.FailedPrecondition, ready + " (n1) is ready"},
	} {
		_, err := vc.fence(tt.req)
		if st, _ := status.FromError(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
			t.Errorf("%s: %v, want %s naming %q", tt.name, err, tt.code, tt.msg)
		}
	}
	// Lifting a fence that is not there is no refusal.
	if _, err := vc.fence(&pb.NodeFenceRequest{NodeId: ready, Fenced: proto.Bool(false)}); err != nil {
		t.Errorf("unfence of a node that is not fenced: %v", err)
	}
}
