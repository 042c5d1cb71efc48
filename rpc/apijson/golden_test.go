package apijson_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// at is a fixed instant with a fractional second, to show how times render.
var at = time.Date(2026, 11, 23, 20, 34, 35, 610_000_000, time.UTC).UnixNano()

func goldenNode() *pb.Node {
	return &pb.Node{
		Id:                "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80",
		Name:              "client-1",
		Status:            pb.NodeStatus_NODE_STATUS_READY,
		StatusDescription: "registered",
		StatusUpdatedAt:   at,
		HttpAddr:          "10.0.0.12:7646",
		RegisteredAt:      at - int64(time.Hour) + 123, // nanosecond precision survives
		CreateIndex:       12,
		ModifyIndex:       18_446_744_073_709_551_000, // beyond float64's exact range
		Fingerprint: &pb.NodeFingerprint{
			Hostname:     "host-1",
			Os:           "linux",
			Arch:         "amd64",
			CpuCores:     8,
			MemoryBytes:  34_359_738_368,
			BerthVersion: "0.1.0",
			Attributes:   map[string]string{"kernel.version": "6.8.0", "cpu.model": "EPYC", "unique.hostname": "host-1"},
		},
		Drivers: map[string]*pb.DriverInfo{
			"raw_exec": {Name: "raw_exec", Detected: true, Healthy: true, HealthDescription: "healthy", Version: "0.1.0", Builtin: true, UpdatedAt: at},
			// An undetected driver shows its false and empty fields too.
			"sleep": {Name: "sleep", Path: "/opt/berth/plugins/sleep", Attributes: map[string]string{}},
		},
		HostVolumes: map[string]*pb.HostVolumeInfo{
			"logs":    {Path: "/var/log/apps", ReadOnly: true},
			"scratch": {Path: "/srv/scratch"},
			"pg-data": {Path: "/var/lib/berth/host_volumes/4a0e0000-0000-4000-8000-000000000001", Id: "4a0e0000-0000-4000-8000-000000000001"},
		},
	}
}

// goldenJob is a job as GET /v1/job/{id} shows it: a service group with a
// constraint, policies and a task with a driver config of each kind.
func goldenJob() *pb.Job {
	return &pb.Job{
		Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
		Constraints: []*pb.Constraint{{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"}},
		Update:      &pb.UpdateStrategy{MaxParallel: 1, MinHealthyMs: 10_000},
		Meta:        map[string]string{"team": "storage"},
		Status:      pb.JobStatus_JOB_STATUS_RUNNING, Version: 3, SubmittedAt: at,
		SourceFile: "web.hcl", CreateIndex: 20, ModifyIndex: 31, JobModifyIndex: 29,
		Groups: []*pb.TaskGroup{{
			Name: "frontend", Count: 3,
			Constraints: []*pb.Constraint{{Operator: "distinct_hosts", Value: "true"}},
			Restart:     &pb.RestartPolicy{Attempts: 2, IntervalMs: 1_800_000, DelayMs: 15_000, Mode: pb.RestartMode_RESTART_MODE_FAIL},
			Reschedule:  &pb.ReschedulePolicy{Attempts: 1, IntervalMs: 3_600_000, DelayMs: 30_000, MaxDelayMs: 3_600_000},
			Tasks: []*pb.Task{{
				Name: "server", Driver: "raw_exec", Leader: true, KillTimeoutMs: 5000, KillSignal: "SIGTERM",
				Config: map[string]*driverpb.ConfigValue{
					"command": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "/usr/bin/python3"}},
					"args":    {Kind: &driverpb.ConfigValue_ListValue{ListValue: &driverpb.StringList{Values: []string{"-m", "http.server", "${BERTH_PORT}"}}}},
				},
				Env:       map[string]string{"MODE": "prod"},
				Resources: &pb.TaskResources{CpuMhz: 200, MemoryMb: 128},
			}, {
				Name: "setup", Driver: "raw_exec",
				Lifecycle: &pb.Lifecycle{Hook: pb.TaskHook_TASK_HOOK_PRESTART},
				Config:    map[string]*driverpb.ConfigValue{"command": {Kind: &driverpb.ConfigValue_StringValue{StringValue: "/bin/true"}}},
			}},
		}},
	}
}

// goldenAlloc is an alloc as `alloc status` reads it: a running task that
// restarted once (its events with details) and a prestart task that ended.
func goldenAlloc() *pb.Allocation {
	sec := int64(time.Second)
	return &pb.Allocation{
		Id: "8ba85cef-1b2c-4d3e-8f40-5a6b7c8d9e0f", Name: "web.frontend[0]", Index: 0,
		EvalId: "61b0b423-0000-4000-8000-000000000001", NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", NodeName: "client-1",
		JobId: "web", JobVersion: 3, TaskGroup: "frontend",
		Resources:         &pb.AllocResources{CpuMhz: 200, MemoryMb: 128, Tasks: map[string]*pb.TaskResources{"server": {CpuMhz: 200, MemoryMb: 128}}},
		DesiredStatus:     pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN,
		DesiredTransition: &pb.DesiredTransition{},
		ClientStatus:      pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING, ClientDescription: "Tasks are running",
		TaskStates: map[string]*pb.TaskState{
			"server": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING, Restarts: 1, LastRestartAt: at + 20*sec, StartedAt: at + 36*sec,
				Events: []*pb.TaskEvent{
					{Type: "Received", OccurredAt: at, Message: "Task received by client"},
					{Type: "Started", OccurredAt: at + sec, Message: "Task started by client"},
					{Type: "Terminated", OccurredAt: at + 20*sec, Message: "Exit Code: 1", Details: map[string]string{"exit_code": "1", "signal": "0", "oom_killed": "false"}},
					{Type: "Restarting", OccurredAt: at + 20*sec, Message: "Task restarting in 15s", Details: map[string]string{"restart_in_ms": "15000"}},
					{Type: "Started", OccurredAt: at + 36*sec, Message: "Task started by client"},
				}},
			"setup": {State: pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_DEAD, StartedAt: at, FinishedAt: at + sec,
				Events: []*pb.TaskEvent{{Type: "Terminated", OccurredAt: at + sec, Message: "Exit Code: 0", Details: map[string]string{"exit_code": "0"}}}},
		},
		PreviousAllocation: "77aa0000-0000-4000-8000-000000000009",
		RescheduleEvents:   []*pb.RescheduleEvent{{RescheduledAt: at - sec, PrevAllocId: "77aa0000-0000-4000-8000-000000000009", PrevNodeId: "9a8b7c6d-0000-4000-8000-000000000002", DelayMs: 30_000}},
		CreatedAt:          at, ModifiedAt: at + 36*sec, CreateIndex: 40, ModifyIndex: 52, AllocModifyIndex: 40,
	}
}

// goldenEval is a blocked evaluation with the reasons `job run` prints.
func goldenEval() *pb.Evaluation {
	return &pb.Evaluation{
		Id: "61b0b423-0000-4000-8000-000000000001", Priority: 50, Type: pb.JobType_JOB_TYPE_SERVICE,
		TriggeredBy: pb.EvalTrigger_EVAL_TRIGGER_JOB_REGISTER, JobId: "web", JobModifyIndex: 29,
		Status: pb.EvalStatus_EVAL_STATUS_BLOCKED, StatusDescription: "1 of 3 allocs of group frontend could not be placed",
		FailedTgAllocs: map[string]*pb.AllocMetric{"frontend": {
			NodesEvaluated: 4, NodesFiltered: 2, NodesAvailable: 4, NodesExhausted: 2, CoalescedFailures: 0,
			ConstraintFiltered: map[string]int32{"${attr.kernel.name} = linux": 1, "missing driver raw_exec": 1},
			DimensionExhausted: map[string]int32{"memory": 2},
		}},
		QueuedAllocations: map[string]int32{"frontend": 1},
		PlanAnnotations:   map[string]*pb.PlanAnnotation{"frontend": {Place: 2}},
		SnapshotIndex:     35, CreatedAt: at, ModifiedAt: at + 1_500_000, CreateIndex: 30, ModifyIndex: 36,
	}
}

// goldenVolume is a volume as GET /v1/volume/csi/{id} will show it.
// Secrets are left out: the volume endpoints redact them;
// this pins how modes and topology read.
func goldenVolume() *pb.Volume {
	return &pb.Volume{Id: "pg-data", Name: "pg-data", PluginId: "ebs", Provider: "ebs.csi.aws.com", ProviderVersion: "1.2.0",
		ExternalId: "vol-0a1b2c3d", CapacityBytes: 10 << 30, RequestedCapacityMinBytes: 10 << 30, RequestedCapacityMaxBytes: 20 << 30,
		Capabilities: []*pb.VolumeCapability{
			{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM},
			{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_BLOCK_DEVICE}},
		MountOptions:       &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}},
		TopologyRequest:    &pb.TopologyRequest{Required: []*pb.Topology{{Segments: map[string]string{"topology.ebs.csi.aws.com/zone": "eu-west-1a"}}}},
		AccessibleTopology: []*pb.Topology{{Segments: map[string]string{"topology.ebs.csi.aws.com/zone": "eu-west-1a"}}},
		Parameters:         map[string]string{"type": "gp3"}, Context: map[string]string{"fsType": "ext4"},
		Schedulable: true, ControllerRequired: true, CreatedAt: at, ModifiedAt: at, CreateIndex: 60, ModifyIndex: 61}
}

// goldenClaim is an alloc's claim whose node unstage failed once.
func goldenClaim() *pb.Claim {
	return &pb.Claim{Id: "c7d1e2f3-0000-4000-8000-000000000001", VolumeId: "pg-data",
		AllocId: "8ba85cef-1b2c-4d3e-8f40-5a6b7c8d9e0f", NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80",
		Mode: pb.ClaimMode_CLAIM_MODE_WRITE, AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
		AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM, State: pb.ClaimState_CLAIM_STATE_NODE_DETACHED,
		LastError: &pb.VolumeError{Message: "NodeUnstageVolume: context deadline exceeded", Class: pb.VolumeErrorClass_VOLUME_ERROR_CLASS_UNCERTAIN, Code: pb.GrpcCode_GRPC_CODE_DEADLINE_EXCEEDED, FailedAt: at},
		Attempts:  2, NextRetryAt: at + int64(4*time.Second), CreatedAt: at, ModifiedAt: at, CreateIndex: 62, ModifyIndex: 70,
		Request: &pb.VolumeRequest{Name: "data", Type: "csi", Source: "pg-data", MountOptions: &pb.MountOptions{FsType: "ext4", MountFlags: []string{"noatime"}}}}
}

// goldenAttachment is a volume published to a node by another node's
// controller.
func goldenAttachment() *pb.Attachment {
	return &pb.Attachment{VolumeId: "pg-data", NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", PluginId: "ebs",
		State: pb.AttachmentState_ATTACHMENT_STATE_ATTACHED, ControllerNodeId: "9a8b7c6d-0000-4000-8000-000000000002",
		PublishContext: map[string]string{"devicePath": "/dev/xvdf"}, CsiNodeId: "i-0abc123", CreatedAt: at, ModifiedAt: at, CreateIndex: 62, ModifyIndex: 64}
}

// goldens are the messages the HTTP API returns, each in its own file.
var goldens = []struct {
	name string
	msg  func() ([]byte, error)
}{
	{"node", func() ([]byte, error) { return apijson.Marshal(goldenNode()) }},
	{"host_volume", func() ([]byte, error) {
		// A dynamic host volume as GET /v1/volume/host/{id} shows it.
		return apijson.Marshal(&pb.HostVolume{
			Id: "4a0e0000-0000-4000-8000-000000000001", Name: "pg-data", PluginId: "mkdir",
			NodeId:      "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80",
			Constraints: []*pb.Constraint{{Attribute: "${meta.disk}", Operator: "=", Value: "ssd"}},
			Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_SINGLE_WRITER,
				AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}},
			Parameters: map[string]string{"mode": "0750"}, RequestedCapacityMinBytes: 1 << 30,
			HostPath: "/var/lib/berth/host_volumes/4a0e0000-0000-4000-8000-000000000001",
			State:    pb.HostVolumeState_HOST_VOLUME_STATE_READY, CreatedAt: at, ModifiedAt: at, CreateIndex: 40, ModifyIndex: 40,
		})
	}},
	{"nodes", func() ([]byte, error) {
		down := goldenNode()
		down.Id, down.Name = "9a8b7c6d-0000-4000-8000-000000000002", "client-2"
		down.Status, down.StatusDescription = pb.NodeStatus_NODE_STATUS_DOWN, "missed heartbeats"
		down.Drivers = nil
		// A node that never set its fingerprint, with a status a newer
		// server might send.
		bare := &pb.Node{Id: "ffffffff-0000-4000-8000-000000000003", Name: "client-3", Status: 7}
		return apijson.MarshalList([]*pb.Node{goldenNode(), down, bare})
	}},
	{"members", func() ([]byte, error) {
		return apijson.MarshalList([]*pb.Member{
			{Server: &pb.ServerMember{Id: "0b7c6f5e-1111-4000-8000-000000000001", Name: "s1", RpcAddr: "10.0.0.1:7647", RaftAddr: "10.0.0.1:7648", HttpAddr: "10.0.0.1:7646", Version: "0.1.0", CreateIndex: 3, ModifyIndex: 3},
				Status: pb.MemberStatus_MEMBER_STATUS_ALIVE, Leader: true, Voter: true},
			{Server: &pb.ServerMember{Id: "0b7c6f5e-1111-4000-8000-000000000002", Name: "s2", RpcAddr: "10.0.0.2:7647", RaftAddr: "10.0.0.2:7648"},
				Status: pb.MemberStatus_MEMBER_STATUS_FAILED, Voter: true},
			{Server: &pb.ServerMember{Id: "0b7c6f5e-1111-4000-8000-000000000003", Name: "s3"}, Status: pb.MemberStatus_MEMBER_STATUS_LEFT},
		})
	}},
	{"raft_configuration", func() ([]byte, error) {
		return apijson.Marshal(&pb.RaftConfigurationResponse{
			Servers: []*pb.RaftServer{
				{Id: "0b7c6f5e-1111-4000-8000-000000000001", Name: "s1", RaftAddr: "10.0.0.1:7648", RpcAddr: "10.0.0.1:7647", Leader: true, Voter: true},
				{Id: "0b7c6f5e-1111-4000-8000-000000000002", Name: "s2", RaftAddr: "10.0.0.2:7648", RpcAddr: "10.0.0.2:7647", Voter: true},
			},
			Index: 42,
			Meta:  &pb.QueryMeta{Index: 42, KnownLeader: true, LastContactMs: 0, ServedBy: "0b7c6f5e-1111-4000-8000-000000000001", NextToken: "0b7c6f5e-1111-4000-8000-000000000003"},
		})
	}},
	{"agent_self", func() ([]byte, error) {
		return apijson.Marshal(&pb.AgentSelf{
			Name: "dev", Version: "0.1.0", DataDir: "/tmp/berth-dev-1", HttpAddr: "127.0.0.1:7646", DevMode: true,
			Server: &pb.AgentServerInfo{Id: "0b7c6f5e-1111-4000-8000-000000000001", RpcAddr: "127.0.0.1:7647", RaftAddr: "127.0.0.1:7648",
				RaftState: "Leader", LeaderId: "0b7c6f5e-1111-4000-8000-000000000001", LastIndex: 9, AppliedIndex: 9, BootstrapExpect: 1,
				JobLimits: &pb.JobLimits{JobMaxCount: 1000, JobMaxGroups: 100, JobMaxTasks: 500, JobMaxAllocs: 5000, JobMaxSize: 1048576}},
			Client: &pb.AgentClientInfo{NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", Registered: true, Servers: []string{"127.0.0.1:7647"}},
		})
	}},
	{"agent_self_client_only", func() ([]byte, error) {
		// A client-only agent: no server section (null), not an empty one.
		return apijson.Marshal(&pb.AgentSelf{Name: "c1", Version: "0.1.0",
			Client: &pb.AgentClientInfo{NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", Servers: []string{"10.0.0.1:7647", "10.0.0.2:7647"}}})
	}},
	{"leader", func() ([]byte, error) {
		return apijson.Marshal(&pb.LeaderResponse{RpcAddr: "10.0.0.1:7647", Id: "0b7c6f5e-1111-4000-8000-000000000001"})
	}},
	{"peers", func() ([]byte, error) {
		return apijson.Marshal(&pb.PeersResponse{RpcAddrs: []string{"10.0.0.1:7647", "10.0.0.2:7647"}})
	}},
	{"remove_peer", func() ([]byte, error) {
		return apijson.Marshal(&pb.RemovePeerResponse{Meta: &pb.WriteMeta{Index: 77}, RemovedId: "0b7c6f5e-1111-4000-8000-000000000002"})
	}},
	{"job", func() ([]byte, error) { return apijson.Marshal(goldenJob()) }},
	{"allocation", func() ([]byte, error) { return apijson.Marshal(goldenAlloc()) }},
	{"evaluation", func() ([]byte, error) { return apijson.Marshal(goldenEval()) }},
	{"job_list", func() ([]byte, error) {
		return apijson.MarshalList([]*pb.JobListStub{{Id: "web", Name: "web", Type: pb.JobType_JOB_TYPE_SERVICE, Priority: 50,
			Status: pb.JobStatus_JOB_STATUS_RUNNING, Version: 3, SubmittedAt: at,
			Summary:     &pb.JobSummary{Groups: map[string]*pb.GroupSummary{"frontend": {Running: 2, Queued: 1}}},
			CreateIndex: 20, ModifyIndex: 31, JobModifyIndex: 29}})
	}},
	{"job_plan", func() ([]byte, error) {
		return apijson.Marshal(&pb.JobPlanResponse{JobModifyIndex: 29, DiffType: "edited",
			Groups:         []*pb.GroupDiff{{Name: "frontend", Type: "edited", Updates: &pb.PlanAnnotation{Place: 1, InPlaceUpdate: 2}, Fields: []string{"count: 2 => 3"}}},
			FailedTgAllocs: map[string]*pb.AllocMetric{}, Meta: &pb.QueryMeta{Index: 36, KnownLeader: true}})
	}},
	{"volume", func() ([]byte, error) { return apijson.Marshal(goldenVolume()) }},
	{"claim", func() ([]byte, error) { return apijson.Marshal(goldenClaim()) }},
	{"attachment", func() ([]byte, error) { return apijson.Marshal(goldenAttachment()) }},
	{"snapshot_record", func() ([]byte, error) {
		// A oneof shows every member, the set one non-null.
		return apijson.Marshal(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{TableIndex: &pb.TableIndex{Table: "nodes", Index: 5}}})
	}},
	{"volume_expand", func() ([]byte, error) {
		// One node expanded, one failed: the capacity stays, the rest pending.
		return apijson.Marshal(&pb.VolumeExpandResponse{CapacityBytes: 21474836480, NodeExpansionRequired: true,
			Nodes: []*pb.VolumeNodeExpansion{{NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", CapacityBytes: 21474836480},
				{NodeId: "7e1a2b3c-4d5e-4f60-8a1b-2c3d4e5f6a7b", Error: `node expansion of volume "pg-data" (csi plugin "ebs") on node 7e1a2b3c-4d5e-4f60-8a1b-2c3d4e5f6a7b: resize2fs failed`}},
			RecordedCapacityBytes: 10737418240, NodeExpansionPendingBytes: 21474836480, Meta: &pb.WriteMeta{Index: 71}})
	}},
}

func TestGoldenFiles(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			got, err := g.msg()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			if !json.Valid(got) {
				t.Fatalf("output is not valid JSON:\n%s", got)
			}
			path := filepath.Join("testdata", g.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}

// TestGoldenJobObjectsDecodeBack reads the job, alloc and evaluation
// golden files the way the Go client does.
func TestGoldenJobObjectsDecodeBack(t *testing.T) {
	for name, want := range map[string]proto.Message{"job": goldenJob(), "allocation": goldenAlloc(), "evaluation": goldenEval(),
		"volume": goldenVolume(), "claim": goldenClaim(), "attachment": goldenAttachment()} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
		if err != nil {
			t.Fatal(err)
		}
		got := want.ProtoReflect().New().Interface()
		if err := apijson.Unmarshal(b, got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("%s decoded %v\nwant %v", name, got, want)
		}
	}
}

// TestGoldenNodeDecodesBack reads the golden file the way a client does.
func TestGoldenNodeDecodesBack(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "node.golden"))
	if err != nil {
		t.Fatal(err)
	}
	got := &pb.Node{}
	if err := apijson.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if want := goldenNode(); !proto.Equal(got, want) {
		t.Fatalf("decoded %v\nwant %v", got, want)
	}
}
