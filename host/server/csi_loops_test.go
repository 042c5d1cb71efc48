package server

import (
	"berth.dev/berth/internal/clock"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// fakeController is a hand-written controllerCaller: it records every
// call, answers from per-method queues of errors (nil: success), keeps
// what is published (volume external ID → CSI node IDs) the way a real
// controller would, and answers ListVolumes from it.
type fakeController struct {
	mu    sync.Mutex
	calls []fakeCall
	// errs holds, per method, the errors the next calls return in order.
	errs map[string][]error
	// published: external volume ID → CSI node IDs it is published to.
	published map[string]map[string]bool
	// context is the publish context every successful publish answers.
	context map[string]string
	// onCall, when set, runs at the start of every call, outside the lock
	// (a test blocks a call there, or stops a server).
	onCall func(ctx context.Context, c fakeCall) error
	// pageSize, when set, makes ListVolumes answer in pages of that many
	// entries, the token being the index of the next one.
	pageSize int
}

var _ controllerCaller = (*fakeController)(nil)

type fakeCall struct {
	node, plugin, method string
	req                  proto.Message
	expect               *pb.CSIControllerInstance
}

func newFakeController() *fakeController {
	return &fakeController{errs: map[string][]error{}, published: map[string]map[string]bool{}, context: map[string]string{"lun": "3"}}
}

func (f *fakeController) ControllerCall(ctx context.Context, nodeID, pluginID string, expect *pb.CSIControllerInstance, method string, req, resp proto.Message) error {
	c := fakeCall{nodeID, pluginID, method, proto.Clone(req), expect}
	f.mu.Lock()
	f.calls = append(f.calls, c)
	hook := f.onCall
	var err error
	if q := f.errs[method]; len(q) > 0 {
		err, f.errs[method] = q[0], q[1:]
	}
	f.mu.Unlock()
	if hook != nil {
		if herr := hook(ctx, c); herr != nil {
			return herr
		}
	}
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r := req.(type) {
	case *csipb.ControllerPublishVolumeRequest:
		if f.published[r.GetVolumeId()] == nil {
			f.published[r.GetVolumeId()] = map[string]bool{}
		}
		f.published[r.GetVolumeId()][r.GetNodeId()] = true
		resp.(*csipb.ControllerPublishVolumeResponse).PublishContext = maps.Clone(f.context)
	case *csipb.ControllerUnpublishVolumeRequest:
		delete(f.published[r.GetVolumeId()], r.GetNodeId())
	case *csipb.ListVolumesRequest:
		out := resp.(*csipb.ListVolumesResponse)
		ids := slices.Sorted(maps.Keys(f.published))
		from := 0
		if tok := r.GetStartingToken(); tok != "" {
			if _, err := fmt.Sscan(tok, &from); err != nil || from > len(ids) {
				return status.Errorf(codes.Aborted, "fake controller: bad starting token %q", tok)
			}
		}
		to := len(ids)
		if f.pageSize > 0 && from+f.pageSize < to {
			to = from + f.pageSize
			out.NextToken = fmt.Sprint(to)
		}
		for _, id := range ids[from:to] {
			out.Entries = append(out.Entries, &csipb.ListVolumesResponse_Entry{
				Volume: &csipb.Volume{VolumeId: id},
				Status: &csipb.ListVolumesResponse_VolumeStatus{PublishedNodeIds: slices.Sorted(maps.Keys(f.published[id]))},
			})
		}
	default:
		return status.Errorf(codes.Unimplemented, "fake controller: %s", method)
	}
	return nil
}

// failNext makes the next calls of method fail with the codes given.
func (f *fakeController) failNext(method string, cs ...codes.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		f.errs[method] = append(f.errs[method], status.Errorf(c, "fake plugin says %s", c))
	}
}

// callsOf returns the calls of method so far.
func (f *fakeController) callsOf(method string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.method == method {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeController) methods() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.method[len("/csi.v1.Controller/"):])
	}
	return out
}

const (
	publishMethod   = csipb.Controller_ControllerPublishVolume_FullMethodName
	unpublishMethod = csipb.Controller_ControllerUnpublishVolume_FullMethodName
	listMethod      = csipb.Controller_ListVolumes_FullMethodName
)

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
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failWrite != nil {
		if err := e.failWrite(t, msg); err != nil {
			return 0, err
		}
	}
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return 0, err
	}
	e.index++
	res := e.fsm.ApplyLog(&raft.Log{Index: e.index, Term: 1, Type: raft.LogCommand, Data: buf})
	return res.Index, res.Err
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
func (e *volEnv) loops(caller controllerCaller) *volumeLoops {
	cfg := defaultVolumeLoopConfig()
	// The reconcile pass is off unless a test turns it on: its periodic
	// ListVolumes calls are not what the other tests count.
	cfg.reconcileInterval = 0
	return &volumeLoops{
		cfg: cfg, state: e.fsm.State, propose: e.propose, caller: caller,
		clock: clock.Real{}, logger: testutil.Logger(e.t).Named("volumes"), jitter: func() float64 { return 0 },
	}
}

// start runs v until the returned stop is called; stop returns once run
// did.
func start(v *volumeLoops) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.run(ctx) }()
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

// ebsController and ebsNode are the plugin instances the tests report:
// a controller that publishes and lists published nodes, and a node
// instance that knows its node as "csi-<node>".
func ebsController(healthy bool) *pb.CSIPluginInfo {
	return &pb.CSIPluginInfo{Healthy: healthy, Provider: "ebs.csi.aws.com", ProviderVersion: "1.2", RequiresControllerPlugin: true, ControllerRequired: true,
		ControllerInfo: &pb.CSIControllerInfo{SupportsAttachDetach: true, SupportsListVolumes: true, SupportsListPublishedNodes: true}}
}

func ebsNode(node string) *pb.CSIPluginInfo {
	return &pb.CSIPluginInfo{Healthy: true, Provider: "ebs.csi.aws.com", ProviderVersion: "1.2", NodeInfo: &pb.CSINodeInfo{Id: "csi-" + node}}
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
	e.reportPlugins("n1", ebsController(true), ebsNode("n1"))
	e.reportPlugins("n2", nil, ebsNode("n2"))
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
		t.Fatalf("attachment %s/%s is %s (%v), want %s", a.GetVolumeId(), a.GetNodeId(), fsm.AttachmentStateWord(a.GetState()), a, fsm.AttachmentStateWord(want))
	}
}

func describeCalls(cs []fakeCall) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s@%s", c.method, c.node))
	}
	return fmt.Sprint(out)
}

// lostLeadership is what a proposal answers once the leader lost its
// leadership.
func lostLeadership(fsm.MessageType, proto.Message) error {
	return fmt.Errorf("proposing: %w", raft.ErrLeadershipLost)
}
