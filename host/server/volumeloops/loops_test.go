package volumeloops

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/volumeloops/volumetest"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

var _ ControllerCaller = (*volumetest.Controller)(nil)

// volEnv is a state machine without raft: proposals apply at once, in
// order, like a one-server raft, so the loops can be run under
// testing/synctest with the bubble's clock. failWrite, when set, decides
// whether a proposal fails before it is applied (a lost leadership).
type volEnv struct {
	t   *testing.T
	fsm *fsm.FSM

	mu        sync.Mutex
	index     uint64
	failWrite func(t fsm.MessageType, msg proto.Message) error
}

func newVolEnv(t *testing.T) *volEnv {
	return &volEnv{t: t, fsm: fsm.New(testutil.Logger(t))}
}

func (e *volEnv) propose(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	res, err := e.proposeResult(ctx, t, msg)
	if res == nil {
		return 0, err
	}
	return res.Index, err
}

// proposeResult is propose with the apply's whole result, as the loops
// propose.
func (e *volEnv) proposeResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failWrite != nil {
		if err := e.failWrite(t, msg); err != nil {
			return nil, err
		}
	}
	return e.applyLocked(t, msg)
}

// applyLocked applies msg as the next entry; e.mu is held (a failWrite
// hook may apply a command that lands just before the proposal).
func (e *volEnv) applyLocked(t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return nil, err
	}
	e.index++
	res := e.fsm.ApplyLog(&raft.Log{Index: e.index, Term: 1, Type: raft.LogCommand, Data: buf})
	return res, res.Err
}

func (e *volEnv) setFailWrite(f func(t fsm.MessageType, msg proto.Message) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failWrite = f
}

// apply applies a setup command, which must succeed.
func (e *volEnv) apply(t fsm.MessageType, msg proto.Message) {
	e.t.Helper()
	if _, err := e.propose(context.Background(), t, msg); err != nil {
		e.t.Fatalf("%s: %v", t, err)
	}
}

// loops returns volume loops over the env with the given caller, on the
// real clock (the bubble's under synctest) and a jitter of zero (a wait
// of exactly 0.8 of its nominal length).
func (e *volEnv) loops(caller ControllerCaller) *Loops {
	cfg := defaultVolumeLoopConfig()
	// The reconcile pass is off unless a test turns it on: its periodic
	// ListVolumes calls are not what the other tests count.
	cfg.reconcileInterval = 0
	return &Loops{
		cfg: cfg, state: e.fsm.State, propose: e.proposeResult, caller: caller,
		clock: clock.Real{}, logger: testutil.Logger(e.t).Named("volumes"), jitter: func() float64 { return 0 },
	}
}

// start runs v until the returned stop is called; stop returns once run
// did.
func start(v *Loops) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	return func() { cancel(); <-done }
}

func (e *volEnv) snap() *fsm.StateSnapshot { return e.fsm.State().Snapshot() }

func (e *volEnv) attachment(volume, node string) *pb.Attachment {
	e.t.Helper()
	a, err := e.snap().Attachment(nil, volume, node)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

func (e *volEnv) claim(id string) *pb.Claim {
	e.t.Helper()
	c, err := e.snap().ClaimByID(nil, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// reportPlugins records what a node runs of plugin ebs.
func (e *volEnv) reportPlugins(node string, controller, nodePlugin *pb.CSIPluginInfo) {
	cmd := &pb.NodeCSIUpdateCommand{NodeId: node, Controllers: map[string]*pb.CSIPluginInfo{}, Nodes: map[string]*pb.CSIPluginInfo{}, DeriveFromServing: true}
	if controller != nil {
		cmd.Controllers["ebs"] = controller
	}
	if nodePlugin != nil {
		cmd.Nodes["ebs"] = nodePlugin
	}
	e.apply(fsm.NodeCSIUpdate, cmd)
}

func (e *volEnv) registerNode(id string) {
	e.apply(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Name: id, Status: pb.NodeStatus_NODE_STATUS_READY}})
}

func (e *volEnv) registerVolume(id string, mode pb.VolumeAccessMode) {
	e.apply(fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{
		Id: id, Name: id, PluginId: "ebs", ExternalId: "ext-" + id,
		Capabilities: []*pb.VolumeCapability{{AccessMode: mode, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
		MountOptions: &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}},
		Secrets:      map[string]string{"token": "s3cret"},
		Context:      map[string]string{"zone": "a"},
	}})
}

func (e *volEnv) operatorClaim(id, volume, node string, mode pb.ClaimMode) {
	e.apply(fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{
		Id: id, VolumeId: volume, NodeId: node, Mode: mode,
		AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM,
	}})
}

// release takes an operator claim down as its client would: releasing,
// then node-detached reported by its node.
func (e *volEnv) release(id, node string) {
	e.apply(fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: id})
	e.apply(fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: id, State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED, NodeId: node}}})
}

// newEBSEnv is the common cluster: n1 runs the controller and a node
// instance, n2 a node instance; volume v1 (single-node-writer) is
// claimed on n2 by operator claim c1, so its attachment v1/n2 is
// attaching.
func newEBSEnv(t *testing.T) *volEnv {
	e := newVolEnv(t)
	e.registerNode("n1")
	e.registerNode("n2")
	e.reportPlugins("n1", volumetest.EBSController(true), volumetest.EBSNode("n1"))
	e.reportPlugins("n2", nil, volumetest.EBSNode("n2"))
	e.registerVolume("v1", pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER)
	e.operatorClaim("c1", "v1", "n2", pb.ClaimMode_CLAIM_MODE_WRITE)
	if a := e.attachment("v1", "n2"); a.GetState() != pb.AttachmentState_ATTACHMENT_STATE_ATTACHING {
		t.Fatalf("setup: attachment v1/n2 = %v, want attaching", a)
	}
	return e
}

func wantState(t *testing.T, a *pb.Attachment, want pb.AttachmentState) {
	t.Helper()
	if a.GetState() != want {
		t.Fatalf("attachment %s/%s is %s (%v), want %s", a.GetVolumeId(), a.GetNodeId(), pb.EnumWord(a.GetState()), a, pb.EnumWord(want))
	}
}

// lostLeadership is what a proposal answers once the leader lost its
// leadership.
func lostLeadership(fsm.MessageType, proto.Message) error {
	return fmt.Errorf("proposing: %w", raft.ErrLeadershipLost)
}
