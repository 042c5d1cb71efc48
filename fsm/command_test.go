package fsm_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// everyCommand is one valid message per command type.
var everyCommand = []struct {
	typ fsm.MessageType
	msg proto.Message
}{
	{fsm.NodeRegister, registerCmd("n1", "alpha", pb.NodeStatus_NODE_STATUS_READY)},
	{fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 7}},
	{fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n1"}},
	{fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", RpcAddr: "127.0.0.1:4647"}}},
	{fsm.ServerDelete, &pb.ServerDeleteCommand{Id: "s1"}},
	{fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web", Type: pb.JobType_JOB_TYPE_SERVICE,
		Groups: []*pb.TaskGroup{{Name: "g", Count: 2, Tasks: []*pb.Task{{Name: "t", Driver: "mock"}}}}},
		Eval: &pb.Evaluation{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_PENDING}, SubmittedAt: 5}},
	{fsm.JobDeregister, &pb.JobDeregisterCommand{JobId: "web", Eval: &pb.Evaluation{Id: "e2", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_PENDING}}},
	{fsm.JobRevert, &pb.JobRevertCommand{JobId: "web", Version: 0}},
	{fsm.EvalUpsert, &pb.EvalUpsertCommand{Evals: []*pb.Evaluation{{Id: "e3", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_BLOCKED}}}},
	{fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e1", JobId: "web",
		Allocs: []*pb.Allocation{{Id: "a1", NodeId: "n1", JobId: "web", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
		Stops:  []*pb.AllocStop{{AllocId: "a0"}}},
		Evals: []*pb.Evaluation{{Id: "e1", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_COMPLETE}}, AppliedAt: 9}},
	{fsm.AllocClientUpdate, &pb.AllocClientUpdateCommand{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a1", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, TaskStates: map[string]*pb.TaskState{"t": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING}}}}}},
	{fsm.AllocDesiredTransition, &pb.AllocDesiredTransitionCommand{Allocs: map[string]*pb.DesiredTransition{"a1": {Migrate: true}}}},
	{fsm.NodeEligibility, &pb.NodeEligibilityCommand{NodeId: "n1", Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE}},
	{fsm.NodeDrain, &pb.NodeDrainCommand{NodeId: "n1", Drain: &pb.DrainStrategy{DeadlineMs: 1000}}},
	{fsm.GC, &pb.GCCommand{AllocIds: []string{"a1"}, EvalIds: []string{"e1"}, JobIds: []string{"web"}}},
	{fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "n1", UpdatedAt: 11,
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": {PluginId: "ebs", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, Healthy: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"ebs": {PluginId: "ebs", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, Healthy: true, NodeInfo: &pb.CSINodeInfo{Id: "i-1"}}}}},
	{fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: "v1", PluginId: "ebs", ExternalId: "vol-1",
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
		MountOptions: &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}}, Secrets: map[string]string{"k": "v"},
		TopologyRequest: &pb.TopologyRequest{Required: []*pb.Topology{{Segments: map[string]string{"zone": "a"}}}}}, RegisteredAt: 12}},
	{fsm.OperatorClaim, &pb.OperatorClaimCommand{Claim: &pb.Claim{Id: "c9", VolumeId: "v1", NodeId: "n1", Operator: true,
		Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
		AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}, CreatedAt: 13}},
	{fsm.AttachmentUpdate, &pb.AttachmentUpdateCommand{VolumeId: "v1", NodeId: "n1", State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED,
		ControllerNodeId: "n1", PublishContext: map[string]string{"device": "/dev/xvdf"}, UpdatedAt: 14}},
	{fsm.ClaimUpdate, &pb.ClaimUpdateCommand{Transitions: []*pb.ClaimTransition{{ClaimId: "c9", State: pb.ClaimState_CLAIM_STATE_IN_USE, NodeId: "n1"},
		{ClaimId: "c9", State: pb.ClaimState_CLAIM_STATE_IN_USE, Error: &pb.VolumeError{Message: "x", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_FINAL}, Attempts: 1}}, UpdatedAt: 15}},
	{fsm.OperatorClaimRelease, &pb.OperatorClaimReleaseCommand{ClaimId: "c9", UpdatedAt: 16}},
	{fsm.NodeFence, &pb.NodeFenceCommand{NodeId: "n1", Fenced: true, UpdatedAt: 17}},
	{fsm.VolumeDeregister, &pb.VolumeDeregisterCommand{VolumeId: "v1", Force: true}},
	{fsm.VolumeDeleting, &pb.VolumeDeletingCommand{VolumeId: "v1", Deleting: true, UpdatedAt: 18}},
	{fsm.HostVolumeRegister, &pb.HostVolumeRegisterCommand{Volume: &pb.HostVolume{Id: "hv1", Name: "data", NodeId: "n1", PluginId: "mkdir",
		HostPath: "/vols/hv1", Parameters: map[string]string{"mode": "0750"}, State: pb.HostVolumeState_HOST_VOLUME_STATE_READY,
		Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
		CreatedAt:    19}, PutBack: true}},
	{fsm.HostVolumeDelete, &pb.HostVolumeDeleteCommand{Id: "hv1"}},
	{fsm.ACLPolicyUpsert, &pb.ACLPolicyUpsertCommand{Policies: []*pb.ACLPolicy{{Name: "readonly", Rules: `job { policy = "read" }`}}}},
	{fsm.ACLTokenUpsert, &pb.ACLTokenUpsertCommand{Tokens: []*pb.ACLToken{{AccessorId: "t1", Name: "ci", Type: fsm.ACLTokenClient,
		Policies: []string{"readonly"}, SecretHash: make([]byte, 32), CreateTime: 20}}}},
	{fsm.ACLTokenDelete, &pb.ACLTokenDeleteCommand{AccessorIds: []string{"t1"}}},
	{fsm.ACLPolicyDelete, &pb.ACLPolicyDeleteCommand{Names: []string{"readonly"}}},
	{fsm.ACLBootstrap, &pb.ACLBootstrapCommand{Token: &pb.ACLToken{AccessorId: "root", Name: "bootstrap", Type: fsm.ACLTokenManagement,
		SecretHash: make([]byte, 32), CreateTime: 21}}},
	{fsm.NodeReadmit, &pb.NodeReadmitCommand{NodeId: "n1", UpdatedAt: 22}},
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range everyCommand {
		buf := mustEncode(t, c.typ, c.msg)
		if buf[0] != byte(c.typ) {
			t.Errorf("%s: first byte %d, want %d", c.typ, buf[0], c.typ)
		}
		if got := fsm.PeekType(buf); got != c.typ {
			t.Errorf("PeekType = %s, want %s", got, c.typ)
		}
		typ, msg, err := fsm.Decode(buf)
		if err != nil {
			t.Fatalf("Decode(%s): %v", c.typ, err)
		}
		if typ != c.typ || !proto.Equal(msg, c.msg) {
			t.Errorf("Decode(%s) = %s %v, want %s %v", c.typ, typ, msg, c.typ, c.msg)
		}
	}
}

func TestMessageTypeNames(t *testing.T) {
	want := map[fsm.MessageType]string{
		fsm.NodeRegister:     "NodeRegister",
		fsm.NodeStatusUpdate: "NodeStatusUpdate",
		fsm.NodeDeregister:   "NodeDeregister",
		fsm.ServerUpsert:     "ServerUpsert",
		fsm.ServerDelete:     "ServerDelete",
		fsm.PlanApply:        "PlanApply",
		fsm.GC:               "GC",
		0:                    "Unknown(0)",
		200:                  "Unknown(200)",
	}
	for typ, name := range want {
		if got := typ.String(); got != name {
			t.Errorf("MessageType(%d).String() = %q, want %q", uint8(typ), got, name)
		}
	}
	// Command numbers are append-only: pin them.
	pinned := map[fsm.MessageType]uint8{
		fsm.NodeRegister: 1, fsm.NodeStatusUpdate: 2, fsm.NodeDeregister: 3, fsm.ServerUpsert: 4, fsm.ServerDelete: 5,
		fsm.JobRegister: 6, fsm.JobDeregister: 7, fsm.JobRevert: 8, fsm.EvalUpsert: 9, fsm.PlanApply: 10,
		fsm.AllocClientUpdate: 11, fsm.AllocDesiredTransition: 12, fsm.NodeEligibility: 13, fsm.NodeDrain: 14, fsm.GC: 15,
		fsm.NodeCSIUpdate: 16, fsm.VolumeRegister: 17, fsm.VolumeDeregister: 18, fsm.ClaimUpdate: 19, fsm.AttachmentUpdate: 20,
		fsm.OperatorClaim: 21, fsm.OperatorClaimRelease: 22, fsm.NodeFence: 23, fsm.VolumeDeleting: 24,
		fsm.HostVolumeRegister: 25, fsm.HostVolumeDelete: 26, fsm.ACLPolicyUpsert: 27, fsm.ACLPolicyDelete: 28,
		fsm.ACLTokenUpsert: 29, fsm.ACLTokenDelete: 30, fsm.ACLBootstrap: 31, fsm.NodeReadmit: 32,
	}
	for typ, n := range pinned {
		if uint8(typ) != n {
			t.Errorf("%s = %d, released as %d: command numbers must never change", typ, uint8(typ), n)
		}
		if typ.Ignorable() || !typ.Known() {
			t.Errorf("%s: Ignorable=%v Known=%v, want false true", typ, typ.Ignorable(), typ.Known())
		}
	}
	if !fsm.MessageType(0x85).Ignorable() || fsm.MessageType(0x85).Known() {
		t.Errorf("0x85 should be ignorable and unknown")
	}
	if fsm.PeekType(nil) != 0 {
		t.Errorf("PeekType(nil) = %s, want 0", fsm.PeekType(nil))
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		typ      fsm.MessageType
		msg      proto.Message
		sentinel error
		mention  string
	}{
		{"unknown type", 42, &pb.NodeDeregisterCommand{}, fsm.ErrUnknownCommand, "42"},
		{"wrong message", fsm.NodeRegister, &pb.NodeDeregisterCommand{}, fsm.ErrMessageMismatch, "berth.v1.NodeDeregisterCommand"},
		{"object not command", fsm.NodeRegister, &pb.Node{Id: "n1"}, fsm.ErrMessageMismatch, "berth.v1.Node"},
		{"nil message", fsm.ServerDelete, nil, fsm.ErrMessageMismatch, "ServerDelete"},
		{"typed nil", fsm.ServerDelete, (*pb.ServerDeleteCommand)(nil), fsm.ErrMessageMismatch, "nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf, err := fsm.Encode(tc.typ, tc.msg)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("Encode = %x, %v; want %v", buf, err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []byte
		typ      fsm.MessageType
		sentinel error
		mention  string
	}{
		{"empty", nil, 0, fsm.ErrEmptyCommand, "empty"},
		{"unknown", []byte{99, 1, 2}, 99, fsm.ErrUnknownCommand, "99"},
		{"unknown ignorable", []byte{0x89}, 0x89, fsm.ErrUnknownCommand, "ignorable"},
		{"malformed", []byte{byte(fsm.NodeStatusUpdate), 0xff, 0xff}, fsm.NodeStatusUpdate, fsm.ErrMalformedCommand, "NodeStatusUpdate (type 2)"},
		{"truncated", append([]byte{byte(fsm.NodeRegister)}, mustEncode(t, fsm.NodeRegister, everyCommand[0].msg)[1:5]...),
			fsm.NodeRegister, fsm.ErrMalformedCommand, "NodeRegister"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, msg, err := fsm.Decode(tc.in)
			if !errors.Is(err, tc.sentinel) || msg != nil {
				t.Fatalf("Decode = %s, %v, %v; want nil message and %v", typ, msg, err, tc.sentinel)
			}
			if typ != tc.typ {
				t.Errorf("type = %s, want %s", typ, tc.typ)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

// TestEncodeDeterministic pins that map fields encode in a fixed order, so
// the same command proposed twice is the same log entry.
func TestEncodeDeterministic(t *testing.T) {
	cmd := &pb.NodeRegisterCommand{Node: fullNode("n1")}
	first := mustEncode(t, fsm.NodeRegister, cmd)
	for range 20 {
		if got := mustEncode(t, fsm.NodeRegister, proto.Clone(cmd)); string(got) != string(first) {
			t.Fatal("encoding the same command twice gave different bytes")
		}
	}
}
