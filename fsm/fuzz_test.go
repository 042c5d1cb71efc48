package fsm_test

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// FuzzDecode feeds arbitrary raft entries to Decode and Apply. Neither may
// panic; Decode must either return a message that re-encodes to an
// equivalent entry or a classified error; Apply must agree with Decode
// about what is undecodable, and must either apply cleanly (indexes
// consistent) or leave the state exactly as it was.
func FuzzDecode(f *testing.F) {
	for _, c := range everyCommand {
		f.Add(mustEncode(f, c.typ, c.msg))
	}
	// A node with every kind of field, kept small: the fuzzer minimizes
	// interesting inputs and a full fingerprint makes that crawl.
	f.Add(mustEncode(f, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{
		Id: "n2", Name: "b", Status: pb.NodeStatus_NODE_STATUS_DOWN, StatusDescription: "x", StatusUpdatedAt: 5,
		Fingerprint: &pb.NodeFingerprint{Hostname: "h", CpuCores: 2, Attributes: map[string]string{"k": "v"}},
		Drivers:     map[string]*pb.DriverInfo{"mock": {Name: "mock", Healthy: true, Attributes: map[string]string{"a": "b"}}},
		HttpAddr:    "127.0.0.1:1", RegisteredAt: 3, CreateIndex: 99, ModifyIndex: 99,
	}}))
	f.Add(mustEncode(f, fsm.NodeRegister, registerCmd("", "anon", pb.NodeStatus_NODE_STATUS_READY)))
	f.Add(mustEncode(f, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{NodeId: "n1", Status: 9}))
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{0x80})
	f.Add([]byte{0xc8, 0x0a, 0x02, 'h', 'i'})
	f.Add([]byte{0x7f})
	f.Add([]byte{byte(fsm.NodeRegister), 0xff})
	f.Add([]byte{byte(fsm.NodeRegister), 0x0a, 0x10})
	f.Add([]byte{byte(fsm.ServerUpsert), 0x0a, 0x00})

	// The state each input is applied to, encoded once: the fuzzer spends
	// its time on inputs, not on building fingerprints.
	base := [][]byte{
		mustEncode(f, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode("n1")}),
		mustEncode(f, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1"}}),
		mustEncode(f, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n2", Status: pb.NodeStatus_NODE_STATUS_READY,
			Resources: &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}}}),
		mustEncode(f, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "web"},
			Eval: &pb.Evaluation{Id: "e0", JobId: "web", Status: pb.EvalStatus_EVAL_STATUS_PENDING}}),
		mustEncode(f, fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: "v0", PluginId: "nfs",
			Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}}),
		mustEncode(f, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e0", JobId: "web",
			Allocs: []*pb.Allocation{{Id: "a0", NodeId: "n2", JobId: "web", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}},
			Claims: []*pb.Claim{{Id: "c0", VolumeId: "v0", AllocId: "a0", Mode: pb.ClaimMode_CLAIM_MODE_WRITE,
				AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}}),
	}

	bases := [][][]byte{base, pluginBase(f)}

	f.Fuzz(func(t *testing.T, data []byte) {
		typ, msg, decodeErr := fsm.Decode(data)
		switch {
		case decodeErr == nil:
			if msg == nil || !typ.Known() {
				t.Fatalf("Decode succeeded with type %s and message %v", typ, msg)
			}
			again, err := fsm.Encode(typ, msg)
			if err != nil {
				t.Fatalf("re-encoding a decoded %s: %v", typ, err)
			}
			if typ2, msg2, err := fsm.Decode(again); err != nil || typ2 != typ || !proto.Equal(msg, msg2) {
				t.Fatalf("decode(encode(decode(x))) = %s %v %v, want %s %v", typ2, msg2, err, typ, msg)
			}
		case errors.Is(decodeErr, fsm.ErrEmptyCommand),
			errors.Is(decodeErr, fsm.ErrUnknownCommand),
			errors.Is(decodeErr, fsm.ErrMalformedCommand):
			if msg != nil {
				t.Fatalf("Decode returned a message with error %v", decodeErr)
			}
		default:
			t.Fatalf("Decode error %v wraps no sentinel", decodeErr)
		}

		for _, base := range bases {
			fuzzApply(t, base, data, typ, decodeErr)
		}
	})
}

// fuzzApply applies data, which Decode answered typ and decodeErr, to the
// state base builds, and checks what FuzzDecode promises.
func fuzzApply(t *testing.T, base [][]byte, data []byte, typ fsm.MessageType, decodeErr error) {
	t.Helper()
	m := fsm.New(nil)
	for i, entry := range base {
		if res := applyAt(m, uint64(i+1), entry); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	before, err := dumpState(m.State())
	if err != nil {
		t.Fatal(err)
	}
	const index = 10
	res := applyAt(m, index, data)
	if res.Index != index || res.Type != fsm.PeekType(data) {
		t.Fatalf("ApplyResult %+v does not describe entry %d of type %s", res, index, fsm.PeekType(data))
	}
	after, err := dumpState(m.State())
	if err != nil {
		t.Fatal(err)
	}
	if decodeErr != nil {
		skipped := errors.Is(decodeErr, fsm.ErrUnknownCommand) && typ.Ignorable()
		if skipped != (res.Err == nil) {
			t.Fatalf("Decode said %v but Apply said %v", decodeErr, res.Err)
		}
	}
	if res.Err != nil || decodeErr != nil {
		if after != before {
			t.Fatalf("entry not applied (%v) but state changed:\n--- before\n%s--- after\n%s", res.Err, before, after)
		}
		return
	}
	checkConsistent(t, m.State(), index)
	// What was applied must survive a snapshot round trip.
	if got := roundtrip(t, m); got != "identical" {
		t.Fatalf("snapshot round trip: %s", got)
	}
}

// pluginBase is a state at pluginInstancesSince with a plugin split into
// its rows, so the fuzzed entry runs the split code: a system job whose
// task runs plugin p (monolith) with its alloc on n2, n2 reporting a
// healthy controller (required) and node instance of it, n1 a node
// instance of a storage adapter of p, and a volume of p.
func pluginBase(f *testing.F) [][]byte {
	f.Helper()
	res := &pb.NodeResources{CpuMhz: 1000, MemoryMb: 1000}
	info := func(alloc string, required bool) *pb.CSIPluginInfo {
		return &pb.CSIPluginInfo{PluginId: "p", Healthy: true, Provider: "prov", ProviderVersion: "1", AllocId: alloc, ControllerRequired: required}
	}
	return [][]byte{
		mustEncode(f, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1", Version: fsm.PluginInstancesSinceVersion}}),
		mustEncode(f, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY, Resources: res}}),
		mustEncode(f, fsm.NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "n2", Status: pb.NodeStatus_NODE_STATUS_READY, Resources: res}}),
		mustEncode(f, fsm.JobRegister, &pb.JobRegisterCommand{Job: &pb.Job{Id: "plug", Type: pb.JobType_JOB_TYPE_SYSTEM, Groups: []*pb.TaskGroup{{Name: "g", Count: 1,
			Tasks: []*pb.Task{{Name: "t", Driver: "exec", CsiPlugin: &pb.CSIPluginConfig{Id: "p", Type: "monolith"}}}}}},
			Eval: &pb.Evaluation{Id: "e0", JobId: "plug", Status: pb.EvalStatus_EVAL_STATUS_PENDING}}),
		mustEncode(f, fsm.PlanApply, &pb.PlanApplyCommand{Plan: &pb.Plan{EvalId: "e0", JobId: "plug",
			Allocs: []*pb.Allocation{{Id: "a0", NodeId: "n2", JobId: "plug", TaskGroup: "g", Resources: &pb.AllocResources{CpuMhz: 10, MemoryMb: 10}}}}}),
		mustEncode(f, fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "n2", UpdatedAt: 1, DeriveFromServing: true,
			Controllers: map[string]*pb.CSIPluginInfo{"p": info("a0", true)}, Nodes: map[string]*pb.CSIPluginInfo{"p": info("a0", false)}}),
		mustEncode(f, fsm.NodeCSIUpdate, &pb.NodeCSIUpdateCommand{NodeId: "n1", UpdatedAt: 2, DeriveFromServing: true,
			Nodes: map[string]*pb.CSIPluginInfo{"p": info("", false)}}),
		mustEncode(f, fsm.VolumeRegister, &pb.VolumeRegisterCommand{Volume: &pb.Volume{Id: "v0", PluginId: "p",
			Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER, AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}}),
	}
}

// checkConsistent asserts the store's invariants after applying entries up
// to raft index maxIndex.
func checkConsistent(t *testing.T, st *fsm.StateStore, maxIndex uint64) {
	t.Helper()
	nodesIdx, _ := st.Index(fsm.TableNodes)
	serversIdx, _ := st.Index(fsm.TableServers)
	nodes, err := st.Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.GetId() == "" || n.GetCreateIndex() == 0 || n.GetCreateIndex() > n.GetModifyIndex() || n.GetModifyIndex() > nodesIdx {
			t.Fatalf("inconsistent node (table index %d): %v", nodesIdx, n)
		}
		// Unknown numbers (a newer server's statuses) are stored; the one
		// status no node may have is unspecified.
		if s := n.GetStatus(); s == pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
			t.Fatalf("node %q stored with status %s", n.GetId(), s)
		}
	}
	servers, err := st.Servers(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.GetId() == "" || s.GetCreateIndex() == 0 || s.GetCreateIndex() > s.GetModifyIndex() || s.GetModifyIndex() > serversIdx {
			t.Fatalf("inconsistent server (table index %d): %v", serversIdx, s)
		}
	}
	jobsIdx, _ := st.Index(fsm.TableJobs)
	jobs, _, err := st.JobsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.GetCreateIndex() == 0 || j.GetCreateIndex() > j.GetJobModifyIndex() || j.GetJobModifyIndex() > j.GetModifyIndex() || j.GetModifyIndex() > jobsIdx {
			t.Fatalf("inconsistent job (table index %d): %v", jobsIdx, j)
		}
		if v, _ := st.JobVersion(nil, j.GetId(), j.GetVersion()); v == nil {
			t.Fatalf("job %q version %d is not in job_versions", j.GetId(), j.GetVersion())
		}
	}
	allocsIdx, _ := st.Index(fsm.TableAllocs)
	allocs, _, err := st.AllocsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs {
		if a.GetCreateIndex() == 0 || a.GetCreateIndex() > a.GetAllocModifyIndex() || a.GetAllocModifyIndex() > a.GetModifyIndex() || a.GetModifyIndex() > allocsIdx {
			t.Fatalf("inconsistent alloc (table index %d): %v", allocsIdx, a)
		}
	}
	checkVolumesConsistent(t, st)
	// node_usage is the sum over each node's live allocs, for every node
	// an alloc names or the nodes table holds.
	usageNodes := map[string]bool{}
	for _, a := range allocs {
		usageNodes[a.GetNodeId()] = true
	}
	for _, n := range nodes {
		usageNodes[n.GetId()] = true
	}
	checkUsage(t, st, sortedKeys(usageNodes), "fuzzed state")
	var tablesMax uint64
	for _, tbl := range []string{fsm.TableNodes, fsm.TableServers, fsm.TableJobs, fsm.TableJobVersions, fsm.TableEvals, fsm.TableAllocs,
		fsm.TableNodeAllocIndex, fsm.TableCSIPlugins, fsm.TableCSIPluginInstances, fsm.TableCSIPluginAllocs, fsm.TableVolumes, fsm.TableClaims, fsm.TableAttachments,
		fsm.TableACLPolicies, fsm.TableACLTokens, fsm.TableACLBootstrap, fsm.TableHostVolumes} {
		idx, _ := st.Index(tbl)
		tablesMax = max(tablesMax, idx)
	}
	if latest, _ := st.LatestIndex(); latest > maxIndex || latest != tablesMax {
		t.Fatalf("latest index %d, highest table index %d, applied up to %d", latest, tablesMax, maxIndex)
	}
	if err := st.CheckPluginRows(); err != nil {
		t.Fatalf("plugin rows: %v", err)
	}
}

// FuzzRestore feeds arbitrary bytes to Restore. It must never panic; when
// it refuses the stream the FSM keeps its store, untouched; when it accepts
// it, the restored state is consistent and survives another round trip.
func FuzzRestore(f *testing.F) {
	src := fsm.New(nil)
	applyOK(f, src, 1, fsm.NodeRegister, registerCmd("n1", "alpha", pb.NodeStatus_NODE_STATUS_READY))
	applyOK(f, src, 2, fsm.NodeRegister, registerCmd("n2", "beta", pb.NodeStatus_NODE_STATUS_DOWN))
	applyOK(f, src, 3, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{Id: "s1"}})
	snap := snapshotBytes(f, src)
	f.Add(snap)
	f.Add(snapshotBytes(f, fsm.New(nil)))
	f.Add(snap[:len(snap)-3])
	// A version 1 stream, and a version 2 one with a table unknown here.
	var v1, v2 bytes.Buffer
	for _, m := range []proto.Message{
		&pb.SnapshotHeader{Version: 1},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Node{Node: &pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY}}},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{TableIndex: &pb.TableIndex{Table: fsm.TableNodes, Index: 4}}},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{TableIndex: &pb.TableIndex{Table: fsm.TableServers}}},
	} {
		if _, err := protodelim.MarshalTo(&v1, m); err != nil {
			f.Fatal(err)
		}
	}
	for _, m := range []proto.Message{
		&pb.SnapshotHeader{Version: 2},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Row{Row: &pb.TableRow{Table: "from_a_newer_version", Row: []byte{0x0a, 0x01, 'j'}}}},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{TableIndex: &pb.TableIndex{Table: "from_a_newer_version", Index: 7}}},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_End{End: &pb.SnapshotEnd{Records: 2}}},
	} {
		if _, err := protodelim.MarshalTo(&v2, m); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(v1.Bytes())
	f.Add(v2.Bytes())
	// A split plugin's rows (pluginBase).
	split := fsm.New(nil)
	for i, entry := range pluginBase(f) {
		if res := applyAt(split, uint64(i+1), entry); res.Err != nil {
			f.Fatal(res.Err)
		}
	}
	if p, insts, err := split.State().CSIPluginRaw("p"); err != nil || p == nil || len(insts) != 3 {
		f.Fatalf("plugin base: plugin %v with %d instance rows (%v), want it split into 3", p, len(insts), err)
	}
	f.Add(snapshotBytes(f, split))
	f.Add([]byte{})
	f.Add([]byte{0x02, 0x08, 0x02})

	f.Fuzz(func(t *testing.T, data []byte) {
		m := fsm.New(nil)
		applyOK(t, m, 1, fsm.NodeRegister, registerCmd("keep", "k", pb.NodeStatus_NODE_STATUS_READY))
		before := m.State()
		want, err := dumpState(before)
		if err != nil {
			t.Fatal(err)
		}
		if err := restoreBytes(m, data); err != nil {
			if !errors.Is(err, fsm.ErrSnapshotCorrupt) && !errors.Is(err, fsm.ErrSnapshotVersion) {
				t.Fatalf("Restore error %v wraps neither ErrSnapshotCorrupt nor ErrSnapshotVersion", err)
			}
			if m.State() != before {
				t.Fatal("a refused restore swapped in a new store")
			}
			if got, _ := dumpState(m.State()); got != want {
				t.Fatalf("a refused restore changed the state:\n%s\nwas\n%s", got, want)
			}
			return
		}
		latest, err := m.State().LatestIndex()
		if err != nil {
			t.Fatal(err)
		}
		checkRestored(t, m.State(), latest)
		if got := roundtrip(t, m); got != "identical" {
			t.Fatalf("round trip of a restored snapshot: %s", got)
		}
	})
}

// checkRestored asserts what holds of any state Restore accepts: every row
// has its key, and no table index is above the latest.
func checkRestored(t *testing.T, st *fsm.StateStore, latest uint64) {
	t.Helper()
	nodes, err := st.Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.GetId() == "" {
			t.Fatalf("restored a node without an ID: %v", n)
		}
	}
	servers, err := st.Servers(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.GetId() == "" {
			t.Fatalf("restored a server without an ID: %v", s)
		}
	}
	for _, table := range []string{fsm.TableNodes, fsm.TableServers} {
		if idx, _ := st.Index(table); idx > latest {
			t.Fatalf("table %s index %d above the latest %d", table, idx, latest)
		}
	}
	if err := st.CheckPluginRows(); err != nil {
		t.Fatalf("restored plugin rows: %v", err)
	}
}

// checkVolumesConsistent asserts what the claim machine keeps true: every
// claim and attachment has its volume; claims and attachments are stored
// only in states rows may hold (freed and detached are removals); an
// alloc's claim is unique per volume; indexes are ordered.
func checkVolumesConsistent(t *testing.T, st *fsm.StateStore) {
	t.Helper()
	claimsIdx, _ := st.Index(fsm.TableClaims)
	claims, _, err := st.ClaimsPage(nil, "", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	pairs := map[[2]string]string{}
	for _, c := range claims {
		if v, _ := st.VolumeByID(nil, c.GetVolumeId()); v == nil {
			t.Fatalf("claim %q on volume %q, which is not stored", c.GetId(), c.GetVolumeId())
		}
		if s := c.GetState(); s < pb.ClaimState_CLAIM_STATE_RESERVED || s > pb.ClaimState_CLAIM_STATE_NODE_DETACHED {
			t.Fatalf("claim %q stored in state %s", c.GetId(), s)
		}
		if c.GetCreateIndex() == 0 || c.GetCreateIndex() > c.GetModifyIndex() || c.GetModifyIndex() > claimsIdx {
			t.Fatalf("inconsistent claim (table index %d): %v", claimsIdx, c)
		}
		if c.GetAllocId() != "" {
			k := [2]string{c.GetAllocId(), c.GetVolumeId()}
			if other, ok := pairs[k]; ok {
				t.Fatalf("alloc %q holds claims %q and %q on volume %q", k[0], other, c.GetId(), k[1])
			}
			pairs[k] = c.GetId()
		}
	}
	atts, err := st.AttachmentsPage()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range atts {
		if v, _ := st.VolumeByID(nil, a.GetVolumeId()); v == nil {
			t.Fatalf("attachment of volume %q to node %q, which is not stored", a.GetVolumeId(), a.GetNodeId())
		}
		if s := a.GetState(); s < pb.AttachmentState_ATTACHMENT_STATE_ATTACHING || s > pb.AttachmentState_ATTACHMENT_STATE_DETACHING {
			t.Fatalf("attachment %s/%s stored in state %s", a.GetVolumeId(), a.GetNodeId(), s)
		}
	}
}
