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
	}
}

// goldens are the messages the HTTP API returns, each in its own file.
var goldens = []struct {
	name string
	msg  func() ([]byte, error)
}{
	{"node", func() ([]byte, error) { return apijson.Marshal(goldenNode()) }},
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
				RaftState: "Leader", LeaderId: "0b7c6f5e-1111-4000-8000-000000000001", LastIndex: 9, AppliedIndex: 9, BootstrapExpect: 1},
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
	{"snapshot_record", func() ([]byte, error) {
		// A oneof shows every member, the set one non-null.
		return apijson.Marshal(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{TableIndex: &pb.TableIndex{Table: "nodes", Index: 5}}})
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
