package endpoints

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// fsmServer stands for the server under the host volume endpoint: its
// proposals apply to a state machine at once; the gate is refused while
// oldServers is set.
type fsmServer struct {
	f          *fsm.FSM
	mu         sync.Mutex
	index      uint64
	oldServers bool
	// refuse, when set, fails every proposal (raft unavailable).
	refuse error
}

func (s *fsmServer) State() *fsm.StateStore { return s.f.State() }
func (s *fsmServer) BlockingRead(context.Context, *pb.QueryOptions, fsm.QueryFunc) (*pb.QueryMeta, error) {
	return nil, errors.New("not in this test")
}
func (s *fsmServer) QueryMeta(uint64) *pb.QueryMeta { return nil }
func (s *fsmServer) ApplyResult(_ context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	if s.refuse != nil {
		return nil, s.refuse
	}
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	res := s.f.ApplyLog(&raft.Log{Index: s.index, Term: 1, Type: raft.LogCommand, Data: buf})
	return res, res.Err
}
func (s *fsmServer) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	res, err := s.ApplyResult(ctx, t, msg)
	if err != nil {
		return 0, err
	}
	return res.Index, nil
}
func (s *fsmServer) RequireServersAt(_ versions.Constraint, since, what string) error {
	if s.oldServers && since == HostVolumesSinceVersion {
		return errors.New("a server is older than " + since + ": " + what)
	}
	return nil
}
func (s *fsmServer) RaftServers() ([]*pb.RaftServer, error) { return nil, nil }

// fakeNode answers the endpoint's node calls with answer, and records
// them (the volume's state in raft at the call).
type fakeNode struct {
	s      *fsmServer
	answer func(create bool, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error)
	calls  []string
}

func (n *fakeNode) HostVolumeOnNode(_ context.Context, create bool, nodeID string, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
	op := "delete"
	if create {
		op = "create"
	}
	stored, _ := n.s.State().HostVolumeByID(nil, v.GetId())
	n.calls = append(n.calls, op+" "+v.GetId()+" on "+nodeID+" recorded "+pb.EnumWord(stored.GetState()))
	return n.answer(create, v)
}

func hostVolumeEndpoint(t *testing.T) (*hostVolumesEndpoint, *fsmServer, *fakeNode) {
	t.Helper()
	s := &fsmServer{f: fsm.New(testutil.Logger(t))}
	for _, n := range []*pb.Node{{Id: hvNode1, Name: "1", Status: pb.NodeStatus_NODE_STATUS_READY},
		{Id: hvNode3, Name: "3", Status: pb.NodeStatus_NODE_STATUS_DOWN}} {
		if _, err := s.Apply(context.Background(), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n}); err != nil {
			t.Fatal(err)
		}
	}
	node := &fakeNode{s: s, answer: func(create bool, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return &pb.HostVolumeOnNodeResponse{HostPath: "/vols/" + v.GetId()}, nil
	}}
	a := &api{Deps: Deps{Reader: s, Proposer: s, Cluster: s, Clock: clock.Real{}, Logger: hclog.NewNullLogger()}}
	return &hostVolumesEndpoint{s: a, calls: node}, s, node
}

func storedHostVolume(t *testing.T, s *fsmServer, id string) *pb.HostVolume {
	t.Helper()
	v, err := s.State().HostVolumeByID(nil, id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func newHostVolume(name string) *pb.HostVolumeCreateRequest {
	return &pb.HostVolumeCreateRequest{Volume: &pb.HostVolume{Name: name, NodeId: hvNode1, PluginId: "mkdir"}}
}

// A create records the volume pending before the node is asked (so the
// node never makes what raft refuses), ready after it answered. A node
// answer lost (Unavailable) keeps it pending; a retry with the ID makes it
// ready. A node refusal for certain forgets it.
func TestHostVolumeCreateRecordsPendingFirst(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	ctx := context.Background()
	resp, err := e.Create(ctx, newHostVolume("data"))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetId()
	if got := node.calls; len(got) != 1 || got[0] != "create "+id+" on "+hvNode1+" recorded pending" {
		t.Fatalf("node calls %v: want the create while the volume is recorded pending", got)
	}
	if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_READY || v.GetHostPath() != "/vols/"+id {
		t.Fatalf("recorded %v", v)
	}

	// A second create of the name is refused by raft before any node call.
	node.calls = nil
	if _, err := e.Create(ctx, newHostVolume("data")); !errors.Is(err, fsm.ErrHostVolumeNameTaken) && !errors.Is(err, ErrNoNodeForHostVolume) {
		t.Fatalf("second create of the name: %v", err)
	}
	if len(node.calls) != 0 {
		t.Fatalf("the node was asked %v for a name raft refuses", node.calls)
	}

	// Uncertain: stays pending, the retry finishes it.
	node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return nil, status.Error(codes.Unavailable, "tunnel closed")
	}
	_, err = e.Create(ctx, newHostVolume("logs"))
	if err == nil || !strings.Contains(err.Error(), "stays recorded pending") {
		t.Fatalf("an uncertain create: %v", err)
	}
	vols, err := s.State().HostVolumesByNode(nil, hvNode1)
	if err != nil {
		t.Fatal(err)
	}
	var pending *pb.HostVolume
	for _, v := range vols {
		if v.GetName() == "logs" {
			pending = v
		}
	}
	if pending.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_PENDING {
		t.Fatalf("after an uncertain create: %v", pending)
	}
	node.answer = func(_ bool, v *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return &pb.HostVolumeOnNodeResponse{HostPath: "/vols/" + v.GetId()}, nil
	}
	retry := newHostVolume("logs")
	retry.Volume.Id = pending.GetId()
	if _, err := e.Create(ctx, retry); err != nil {
		t.Fatal(err)
	}
	if v := storedHostVolume(t, s, pending.GetId()); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_READY {
		t.Fatalf("after the retry: %v", v)
	}

	// Refused for certain: nothing made, nothing recorded.
	node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return nil, status.Error(codes.InvalidArgument, "bad parameters")
	}
	if _, err := e.Create(ctx, newHostVolume("tmp")); status.Code(err) != codes.InvalidArgument && !strings.Contains(err.Error(), "bad parameters") {
		t.Fatalf("a refused create: %v", err)
	}
	vols, _ = s.State().HostVolumesByNode(nil, hvNode1)
	for _, v := range vols {
		if v.GetName() == "tmp" {
			t.Fatalf("a create the node refused is recorded: %v", v)
		}
	}
}

// A re-create (the ID given) may not rename the volume, nor revive one
// being deleted; neither reaches the node (whose data would be at risk).
func TestHostVolumeRecreateRefusals(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	ctx := context.Background()
	resp, err := e.Create(ctx, newHostVolume("data"))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetId()
	node.calls = nil
	renamed := newHostVolume("other")
	renamed.Volume.Id = id
	if _, err := e.Create(ctx, renamed); err == nil || !strings.Contains(err.Error(), "name does not change") {
		t.Fatalf("a rename: %v", err)
	}
	marked := proto.CloneOf(storedHostVolume(t, s, id))
	marked.State = pb.HostVolumeState_HOST_VOLUME_STATE_DELETING
	if _, err := s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: marked}); err != nil {
		t.Fatal(err)
	}
	again := newHostVolume("data")
	again.Volume.Id = id
	if _, err := e.Create(ctx, again); !errors.Is(err, fsm.ErrVolumeDeleting) {
		t.Fatalf("a re-create of a volume being deleted: %v", err)
	}
	if len(node.calls) != 0 {
		t.Fatalf("node calls %v", node.calls)
	}
}

// Delete marks the volume deleting before the node call; a certain
// refusal puts it back as it was, an uncertain failure keeps the mark (the
// node may have removed it) and a delete again finishes; a pending volume
// is deleted too.
func TestHostVolumeDeleteMarkAndPutBack(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	ctx := context.Background()
	resp, err := e.Create(ctx, newHostVolume("data"))
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetVolume().GetId()
	node.calls = nil
	node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return nil, status.Error(codes.Internal, "plugin failed")
	}
	if _, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: id}); err == nil {
		t.Fatal("a refused delete succeeded")
	}
	if got := node.calls; len(got) != 1 || got[0] != "delete "+id+" on "+hvNode1+" recorded deleting" {
		t.Fatalf("node calls %v: want the delete while the volume is marked deleting", got)
	}
	if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_READY {
		t.Fatalf("after a refused delete: %v, want ready again", v)
	}
	node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, "no answer")
	}
	if _, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: id}); err == nil || !strings.Contains(err.Error(), "stays marked deleting") {
		t.Fatalf("an uncertain delete: %v", err)
	}
	if v := storedHostVolume(t, s, id); v.GetState() != pb.HostVolumeState_HOST_VOLUME_STATE_DELETING {
		t.Fatalf("after an uncertain delete: %v, want deleting", v)
	}
	node.answer = func(bool, *pb.HostVolume) (*pb.HostVolumeOnNodeResponse, error) {
		return &pb.HostVolumeOnNodeResponse{}, nil
	}
	if _, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if v := storedHostVolume(t, s, id); v != nil {
		t.Fatalf("still recorded: %v", v)
	}

	pending := &pb.HostVolume{Id: "p1", Name: "half", NodeId: hvNode1, State: pb.HostVolumeState_HOST_VOLUME_STATE_PENDING}
	if _, err := s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: pending}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: "p1"}); err != nil || storedHostVolume(t, s, "p1") != nil {
		t.Fatalf("delete of a pending volume: %v", err)
	}
}

// -force forgets a volume of a down node without a node call, warning
// that its data may remain; a ready node's volume is refused.
func TestHostVolumeForceDelete(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	ctx := context.Background()
	for _, v := range []*pb.HostVolume{
		{Id: "up", Name: "a", NodeId: hvNode1, HostPath: "/vols/up", State: pb.HostVolumeState_HOST_VOLUME_STATE_READY},
		{Id: "down", Name: "a", NodeId: hvNode3, HostPath: "/vols/down", State: pb.HostVolumeState_HOST_VOLUME_STATE_READY},
	} {
		if _, err := s.Apply(ctx, fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: v}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: "up", Force: true}); !errors.Is(err, ErrHostVolumeNodeUp) {
		t.Fatalf("forced delete on a ready node: %v", err)
	}
	resp, err := e.Delete(ctx, &pb.HostVolumeDeleteRequest{Id: "down", Force: true})
	if err != nil || !strings.Contains(resp.GetWarning(), "its data may remain there (/vols/down)") {
		t.Fatalf("forced delete on a down node: %v, %v", resp, err)
	}
	if storedHostVolume(t, s, "down") != nil || len(node.calls) != 0 {
		t.Fatalf("forced delete: recorded %v, node calls %v", storedHostVolume(t, s, "down"), node.calls)
	}
}

// Create and delete are refused, before any node call, while a server is
// older than hostVolumesSince.
func TestHostVolumeEndpointChecksTheGate(t *testing.T) {
	e, s, node := hostVolumeEndpoint(t)
	s.oldServers = true
	if _, err := e.Create(context.Background(), newHostVolume("data")); err == nil || !strings.Contains(err.Error(), HostVolumesSinceVersion) {
		t.Fatalf("create with an old server: %v", err)
	}
	if _, err := e.Delete(context.Background(), &pb.HostVolumeDeleteRequest{Id: "x"}); err == nil || !strings.Contains(err.Error(), HostVolumesSinceVersion) {
		t.Fatalf("delete with an old server: %v", err)
	}
	if len(node.calls) != 0 {
		t.Fatalf("node calls %v", node.calls)
	}
}
