package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// benchPayloads is every payload the raft section measures.
func benchPayloads(t *testing.T) []payloadSpec {
	t.Helper()
	headline, err := realPayload()
	if err != nil {
		t.Fatal(err)
	}
	return []payloadSpec{headline, stressPayload()}
}

// TestDevNodeIsARealRegistration checks the captured file is what the
// server proposes for a registering dev agent: it decodes as a pb.Node, and a
// NodeRegister of it is accepted by berth's FSM and stored field for field.
func TestDevNodeIsARealRegistration(t *testing.T) {
	n, err := devNode()
	if err != nil {
		t.Fatal(err)
	}
	if len(n.GetId()) != len(idMarker) {
		t.Errorf("captured node ID %q is %d bytes; client node IDs are UUIDs of %d", n.GetId(), len(n.GetId()), len(idMarker))
	}
	if n.GetCreateIndex() != 0 || n.GetModifyIndex() != 0 {
		t.Errorf("create/modify index %d/%d kept: they are the FSM's to assign, not part of the command", n.GetCreateIndex(), n.GetModifyIndex())
	}
	fp := n.GetFingerprint()
	if fp.GetOs() == "" || fp.GetArch() == "" || fp.GetCpuCores() <= 0 || fp.GetMemoryBytes() == 0 {
		t.Errorf("captured fingerprint %v lacks what every client reports (os, arch, cores, memory)", fp)
	}
	for name, d := range n.GetDrivers() {
		if d.GetName() != name {
			t.Errorf("driver under key %q is named %q", name, d.GetName())
		}
	}

	data, err := fsm.Encode(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil)
	if res := f.ApplyLog(&raft.Log{Index: 7, Term: 1, Type: raft.LogCommand, Data: data}); res.Err != nil {
		t.Fatalf("applying the captured registration: %v", res.Err)
	}
	stored, err := f.State().NodeByID(nil, n.GetId())
	if err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(n).(*pb.Node)
	want.CreateIndex, want.ModifyIndex = 7, 7
	// A node registers eligible unless it says otherwise.
	want.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
	if !proto.Equal(stored, want) {
		t.Errorf("stored node differs from the captured one:\n got %v\nwant %v", stored, want)
	}
}

func TestDevNodeRejectsWhatIsNotARegisteredNode(t *testing.T) {
	saved := devNodeJSON
	t.Cleanup(func() { devNodeJSON = saved })
	for _, tc := range []struct{ name, json, want string }{
		{"not JSON", `{"id":`, "testdata/dev-node.json"},
		{"unknown field", `{"id":"x","name":"n","nodes":[]}`, "nodes"},
		{"a node list", `[{"id":"x"}]`, "testdata/dev-node.json"},
		{"no fingerprint", `{"id":"6de5a96b-40e7-4ff7-b000-d80b59e177f3","name":"vm","status":"ready"}`, "fingerprint present false"},
		{"down", `{"id":"6de5a96b-40e7-4ff7-b000-d80b59e177f3","name":"vm","status":"down","fingerprint":{"os":"linux"}}`, "NODE_STATUS_DOWN"},
	} {
		devNodeJSON = []byte(tc.json)
		_, err := devNode()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: devNode() = %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestPayloadsAreDistinctRegistrations(t *testing.T) {
	for _, spec := range benchPayloads(t) {
		t.Run(spec.name, func(t *testing.T) {
			p, err := newPayloads(spec)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for i := range 3 {
				data := p.next()
				if len(data) != p.size() {
					t.Fatalf("entry %d: %d bytes, want %d", i, len(data), p.size())
				}
				typ, msg, err := fsm.Decode(data)
				if err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				if typ != fsm.NodeRegister {
					t.Fatalf("entry %d: type %s, want NodeRegister", i, typ)
				}
				n := msg.(*pb.NodeRegisterCommand).GetNode()
				id := n.GetId()
				if id == idMarker || len(id) != len(idMarker) || seen[id] {
					t.Fatalf("entry %d: node ID %q is the placeholder, the wrong length, or reused (seen %v)", i, id, seen)
				}
				seen[id] = true
				if want := spec.node(id); !proto.Equal(n, want) {
					t.Errorf("entry %d decodes to\n%v\nwant the spec's node for %s\n%v", i, n, id, want)
				}
				want, err := encodeRegister(spec, id)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(data, want) {
					t.Errorf("entry %d differs from fsm.Encode of the same node", i)
				}
			}
		})
	}
}

func TestRealPayloadIsTheCapturedNode(t *testing.T) {
	spec, err := realPayload()
	if err != nil {
		t.Fatal(err)
	}
	captured := &pb.Node{}
	if err := apijson.Unmarshal(devNodeJSON, captured); err != nil {
		t.Fatal(err)
	}
	id := nodeID(42)
	got := spec.node(id)
	if got.GetId() != id {
		t.Fatalf("payload node ID %q, want %q", got.GetId(), id)
	}
	// Everything but the ID and the FSM-assigned indexes is the capture's.
	got.Id, captured.Id = "", ""
	captured.CreateIndex, captured.ModifyIndex = 0, 0
	if !proto.Equal(got, captured) {
		t.Errorf("real payload node\n%v\ndiffers from the capture\n%v", got, captured)
	}
	first := spec.node(id)
	first.Fingerprint.Hostname = "changed"
	if spec.node(id).GetFingerprint().GetHostname() == "changed" {
		t.Error("changing one payload node changed the next: the capture is shared, not cloned")
	}
}

func TestStressPayloadIsHeavy(t *testing.T) {
	id := nodeID(7)
	n := stressPayload().node(id)
	if n.GetName() != "client-"+id || n.GetFingerprint().GetHostname() != "host-"+id {
		t.Errorf("name %q, hostname %q: want the ID in both, so stamping must cover three places", n.GetName(), n.GetFingerprint().GetHostname())
	}
	if len(n.GetDrivers()) != 10 || len(n.GetFingerprint().GetAttributes()) != 30 {
		t.Errorf("%d drivers, %d attributes: not the stress node", len(n.GetDrivers()), len(n.GetFingerprint().GetAttributes()))
	}
	p, err := newPayloads(stressPayload())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.at) != 3 {
		t.Errorf("ID stamped at %d places, want 3 (ID, name, hostname)", len(p.at))
	}
	headline, err := realPayload()
	if err != nil {
		t.Fatal(err)
	}
	rp, err := newPayloads(headline)
	if err != nil {
		t.Fatal(err)
	}
	if p.size() <= 2*rp.size() {
		t.Errorf("stress entry %d bytes, real %d: the stress payload should be far heavier", p.size(), rp.size())
	}
}

func TestNewPayloadsRefusesTemplatesStampingCannotReproduce(t *testing.T) {
	for _, tc := range []struct {
		name string
		node func(id string) *pb.Node
		want string
	}{
		{"ID nowhere", func(string) *pb.Node {
			return &pb.Node{Id: "fixed", Name: "n", Status: pb.NodeStatus_NODE_STATUS_READY}
		}, "placeholder not found"},
		{"ID also shortened", func(id string) *pb.Node {
			return &pb.Node{Id: id, Name: id[:8], Status: pb.NodeStatus_NODE_STATUS_READY}
		}, "does not reproduce"},
	} {
		_, err := newPayloads(payloadSpec{name: tc.name, node: tc.node})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: newPayloads = %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestPayloadsEntriesAreNotShared(t *testing.T) {
	p, err := newPayloads(stressPayload())
	if err != nil {
		t.Fatal(err)
	}
	a := p.next()
	before := bytes.Clone(a)
	p.next()
	if !bytes.Equal(a, before) {
		t.Fatal("minting the next entry changed an earlier one, which raft may still hold")
	}
}

func TestPayloadsEachRegisterANewNode(t *testing.T) {
	for _, spec := range benchPayloads(t) {
		t.Run(spec.name, func(t *testing.T) {
			p, err := newPayloads(spec)
			if err != nil {
				t.Fatal(err)
			}
			f := fsm.New(nil)
			const n = 5
			for i := range n {
				res := f.ApplyLog(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: p.next()})
				if res.Err != nil {
					t.Fatalf("apply %d: %v", i, res.Err)
				}
			}
			nodes, err := f.State().Nodes(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(nodes) != n {
				t.Fatalf("%d nodes after %d registrations, want %d", len(nodes), n, n)
			}
		})
	}
}
