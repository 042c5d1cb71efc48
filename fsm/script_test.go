package fsm_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestScripts runs testdata/*.txt: commands applied to an FSM, each followed
// by the result, any log lines, and the whole state. Regenerate the expected
// output with: go test ./fsm -run TestScripts -rewrite
//
// Commands (index=N overrides the raft index, which otherwise counts up):
//
//	register-node id= [name= status=ready|down|unspecified|N desc= at= registered= http= drivers=(a,b) create= modify=]
//	              [cpu= mem= eligible=true|false]
//	update-status id= status= [desc= at= if= evals=(id:job,...)]
//	deregister-node id=
//	upsert-server id= [name= rpc= raft= http= version=]
//	delete-server id=
//	unknown-command type=N        an entry of type N with a small body
//	apply-raw hex=...             an entry with exactly these bytes
//	reapply                       the previous entry again, at the same index
//	snapshot name=                persist the state under name
//	restore name=                 restore the named snapshot
//	restore-corrupt name= kind=   restore a damaged copy (see corrupt)
//	roundtrip                     snapshot, restore into a fresh FSM, compare
//	state                         print the state
//
// and the job, eval, alloc and node operation commands of script_jobs_test.go.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newScriptHarness(t)
		datadriven.RunTest(t, path, h.run)
	})
}

type scriptHarness struct {
	fsm   *fsm.FSM
	logs  bytes.Buffer
	next  uint64
	last  *raft.Log
	snaps map[string][]byte
}

func newScriptHarness(t *testing.T) *scriptHarness {
	h := &scriptHarness{next: 1, snaps: map[string][]byte{}}
	h.fsm = fsm.New(hclog.New(&hclog.LoggerOptions{
		Level:       hclog.Info,
		Output:      &h.logs,
		DisableTime: true,
	}))
	return h
}

func (h *scriptHarness) run(t *testing.T, td *datadriven.TestData) string {
	var out strings.Builder
	if data, ok := h.encode(t, td); ok {
		h.apply(t, td, &out, data)
	} else {
		switch td.Cmd {
		case "batch":
			h.batch(t, td, &out)
		case "reapply":
			if h.last == nil {
				td.Fatalf(t, "nothing to reapply")
			}
			h.report(&out, h.fsm.ApplyLog(h.last))
		case "snapshot":
			name := argString(t, td, "name", "")
			h.snaps[name] = snapshotBytes(t, h.fsm)
			fmt.Fprintf(&out, "snapshot %s: %s\n", name, describeSnapshot(t, h.snaps[name]))
			return stableText(out.String())
		case "restore":
			h.reportRestore(&out, restoreBytes(h.fsm, h.snapshot(t, td)))
		case "restore-corrupt":
			kind := argString(t, td, "kind", "")
			h.reportRestore(&out, restoreBytes(h.fsm, corrupt(t, td, h.snapshot(t, td), kind)))
		case "roundtrip":
			fmt.Fprintf(&out, "roundtrip: %s\n", roundtrip(t, h.fsm))
			return out.String()
		case "gc-candidates":
			cmd, err := h.fsm.State().GCCandidates(uint64(argInt(t, td, "before", 0)), int(argInt(t, td, "limit", 0)))
			if err != nil {
				td.Fatalf(t, "GCCandidates: %v", err)
			}
			fmt.Fprintf(&out, "candidates: allocs=%v evals=%v jobs=%v\n", cmd.GetAllocIds(), cmd.GetEvalIds(), cmd.GetJobIds())
			return out.String()
		case "put-volume-unchecked":
			// A volume row as an older server stored it, past the
			// apply's checks (no raft entry: the state is as if restored).
			id := argString(t, td, "id", "")
			v := &pb.Volume{Id: id, Name: id, PluginId: argString(t, td, "plugin", ""), ExternalId: argString(t, td, "external", "ext-"+id),
				Capabilities: []*pb.VolumeCapability{{AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_WRITER,
					AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM}}}
			if err := h.fsm.State().PutVolumeUnchecked(h.next, v); err != nil {
				td.Fatalf(t, "put-volume-unchecked: %v", err)
			}
			h.next++
		case "set-claim-state-unchecked":
			// A claim's state as if restored, past the apply's checks.
			if err := h.fsm.State().SetClaimStateUnchecked(h.next, argString(t, td, "id", ""), claimState(t, td)); err != nil {
				td.Fatalf(t, "set-claim-state-unchecked: %v", err)
			}
			h.next++
		case "state":
		default:
			td.Fatalf(t, "unknown command %q", td.Cmd)
		}
	}
	h.flushLogs(&out)
	dump, err := dumpState(h.fsm.State())
	if err != nil {
		td.Fatalf(t, "dump: %v", err)
	}
	out.WriteString(dump)
	return stableText(out.String())
}

// encode returns the raft entry a command of the script applies, false for
// the commands that apply none.
func (h *scriptHarness) encode(t *testing.T, td *datadriven.TestData) ([]byte, bool) {
	switch td.Cmd {
	case "register-node":
		n := &pb.Node{Id: argString(t, td, "id", "")}
		n.Name = argString(t, td, "name", n.Id)
		n.Status = argStatus(t, td, "status", pb.NodeStatus_NODE_STATUS_READY)
		n.StatusDescription = argString(t, td, "desc", "")
		n.StatusUpdatedAt = argInt(t, td, "at", 0)
		n.RegisteredAt = argInt(t, td, "registered", 0)
		n.HttpAddr = argString(t, td, "http", "")
		n.CreateIndex = uint64(argInt(t, td, "create", 0))
		n.ModifyIndex = uint64(argInt(t, td, "modify", 0))
		if arg, ok := td.Arg("drivers"); ok {
			n.Drivers = map[string]*pb.DriverInfo{}
			for _, d := range arg.Vals {
				n.Drivers[d] = &pb.DriverInfo{Name: d, Detected: true, Healthy: true}
			}
		}
		if td.HasArg("cpu") || td.HasArg("mem") {
			n.Resources = &pb.NodeResources{CpuMhz: argInt(t, td, "cpu", 0), MemoryMb: argInt(t, td, "mem", 0)}
		}
		if td.HasArg("eligible") {
			n.Eligibility = argEligibility(t, td)
		}
		n.SecretHash = []byte(argString(t, td, "secret", ""))
		cmd := &pb.NodeRegisterCommand{Node: n, Evals: argEvals(t, td, pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE)}
		if td.HasArg("checked") {
			// checked=none: the proposer found no hash.
			cmd.CheckedSecretHash = []byte{}
			if v := argString(t, td, "checked", ""); v != "none" {
				cmd.CheckedSecretHash = []byte(v)
			}
		}
		return mustEncode(t, fsm.NodeRegister, cmd), true
	case "update-status":
		return mustEncode(t, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
			NodeId:        argString(t, td, "id", ""),
			Status:        argStatus(t, td, "status", pb.NodeStatus_NODE_STATUS_UNSPECIFIED),
			Description:   argString(t, td, "desc", ""),
			UpdatedAt:     argInt(t, td, "at", 0),
			IfModifyIndex: uint64(argInt(t, td, "if", 0)),
			Evals:         argEvals(t, td, pb.EvalTrigger_EVAL_TRIGGER_NODE_UPDATE),
		}), true
	case "readmit-node":
		return mustEncode(t, fsm.NodeReadmit, &pb.NodeReadmitCommand{NodeId: argString(t, td, "id", ""), UpdatedAt: argInt(t, td, "at", 0)}), true
	case "deregister-node":
		return mustEncode(t, fsm.NodeDeregister, &pb.NodeDeregisterCommand{
			NodeId: argString(t, td, "id", ""),
		}), true
	case "upsert-server":
		id := argString(t, td, "id", "")
		return mustEncode(t, fsm.ServerUpsert, &pb.ServerUpsertCommand{Server: &pb.ServerMember{
			Id:       id,
			Name:     argString(t, td, "name", id),
			RpcAddr:  argString(t, td, "rpc", ""),
			RaftAddr: argString(t, td, "raft", ""),
			HttpAddr: argString(t, td, "http", ""),
			Version:  argString(t, td, "version", ""),
		}}), true
	case "delete-server":
		return mustEncode(t, fsm.ServerDelete, &pb.ServerDeleteCommand{
			Id: argString(t, td, "id", ""),
		}), true
	case "unknown-command":
		typ := argInt(t, td, "type", -1)
		if typ < 0 || typ > 255 {
			td.Fatalf(t, "unknown-command needs type=0..255")
		}
		return []byte{byte(typ), 0x0a, 0x02, 'h', 'i'}, true
	case "apply-raw":
		raw, err := hex.DecodeString(argString(t, td, "hex", ""))
		if err != nil {
			td.Fatalf(t, "hex: %v", err)
		}
		return raw, true
	}
	return encodeJobCommand(t, td)
}

// stableText undoes the protobuf library's deliberate randomization of its
// error messages (it swaps a space for a non-breaking one per build, so
// nobody matches on the text), keeping golden files stable across builds.
func stableText(s string) string {
	return strings.NewReplacer(`\u00a0`, " ", "\u00a0", " ").Replace(s)
}

// apply applies data at the next raft index (or index=N).
func (h *scriptHarness) apply(t *testing.T, td *datadriven.TestData, out *strings.Builder, data []byte) {
	index := h.next
	if td.HasArg("index") {
		index = uint64(argInt(t, td, "index", 0))
	}
	h.next = max(h.next, index+1)
	h.last = &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}
	h.report(out, h.fsm.ApplyLog(h.last))
}

func (h *scriptHarness) report(out *strings.Builder, res *fsm.ApplyResult) {
	if res.Err != nil {
		fmt.Fprintf(out, "%s@%d: error (%s): %v\n", res.Type, res.Index, sentinelName(res.Err), res.Err)
		return
	}
	fmt.Fprintf(out, "%s@%d: ok\n", res.Type, res.Index)
	if pr, ok := res.Response.(*pb.PlanResult); ok {
		fmt.Fprintf(out, "plan result: index=%d applied allocs=%d stops=%d", pr.GetIndex(), pr.GetAppliedAllocs(), pr.GetAppliedStops())
		if n := pr.GetAppliedClaims(); n > 0 {
			fmt.Fprintf(out, " claims=%d", n)
		}
		out.WriteString("\n")
		for _, n := range pr.GetRefusedNodes() {
			fmt.Fprintf(out, "refused %s: %s\n", n, pr.GetRefusals()[n])
		}
	}
}

func (h *scriptHarness) reportRestore(out *strings.Builder, err error) {
	if err != nil {
		fmt.Fprintf(out, "restore: error (%s): %v\n", sentinelName(err), err)
		return
	}
	out.WriteString("restore: ok\n")
}

func (h *scriptHarness) flushLogs(out *strings.Builder) {
	for line := range strings.Lines(h.logs.String()) {
		fmt.Fprintf(out, "log: %s", line)
	}
	h.logs.Reset()
}

func (h *scriptHarness) snapshot(t *testing.T, td *datadriven.TestData) []byte {
	name := argString(t, td, "name", "")
	b, ok := h.snaps[name]
	if !ok {
		td.Fatalf(t, "no snapshot %q", name)
	}
	return b
}

// sentinelName names the package sentinel err wraps, so the golden files
// show the classification callers switch on, not just the text.
func sentinelName(err error) string {
	for _, s := range []struct {
		name string
		err  error
	}{
		{"ErrEmptyCommand", fsm.ErrEmptyCommand},
		{"ErrUnknownCommand", fsm.ErrUnknownCommand},
		{"ErrMalformedCommand", fsm.ErrMalformedCommand},
		{"ErrInvalidCommand", fsm.ErrInvalidCommand},
		{"ErrNodeNotFound", fsm.ErrNodeNotFound},
		{"ErrNodeChanged", fsm.ErrNodeChanged},
		{"ErrNodeSecretMismatch", fsm.ErrNodeSecretMismatch},
		{"ErrJobNotFound", fsm.ErrJobNotFound},
		{"ErrJobVersionNotFound", fsm.ErrJobVersionNotFound},
		{"ErrJobChanged", fsm.ErrJobChanged},
		{"ErrAllocNodeMismatch", fsm.ErrAllocNodeMismatch},
		{"ErrNodeDraining", fsm.ErrNodeDraining},
		{"ErrVolumeNotFound", fsm.ErrVolumeNotFound},
		{"ErrVolumeInUse", fsm.ErrVolumeInUse},
		{"ErrHostVolumeNameTaken", fsm.ErrHostVolumeNameTaken},
		{"ErrHostVolumeMarkChanged", fsm.ErrHostVolumeMarkChanged},
		{"ErrHostVolumeNotPending", fsm.ErrHostVolumeNotPending},
		{"ErrVolumeDeleting", fsm.ErrVolumeDeleting},
		{"ErrVolumeChanged", fsm.ErrVolumeChanged},
		{"ErrExternalVolumeTaken", fsm.ErrExternalVolumeTaken},
		{"ErrVolumeRegistered", fsm.ErrVolumeRegistered},
		{"ErrNoFreeClaim", fsm.ErrNoFreeClaim},
		{"ErrMaxVolumes", fsm.ErrMaxVolumes},
		{"ErrClaimCapability", fsm.ErrClaimCapability},
		{"ErrClaimNotFound", fsm.ErrClaimNotFound},
		{"ErrClaimTransition", fsm.ErrClaimTransition},
		{"ErrClaimNodeMismatch", fsm.ErrClaimNodeMismatch},
		{"ErrNotOperatorClaim", fsm.ErrNotOperatorClaim},
		{"ErrAttachmentNotFound", fsm.ErrAttachmentNotFound},
		{"ErrAttachmentTransition", fsm.ErrAttachmentTransition},
		{"ErrNodeUnavailable", fsm.ErrNodeUnavailable},
		{"ErrSnapshotVersion", fsm.ErrSnapshotVersion},
		{"ErrSnapshotCorrupt", fsm.ErrSnapshotCorrupt},
	} {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "unclassified"
}

// corrupt damages a snapshot stream in one of several ways.
func corrupt(t *testing.T, td *datadriven.TestData, snap []byte, kind string) []byte {
	recs := splitRecords(t, snap)
	switch kind {
	case "empty":
		return nil
	case "truncate-mid":
		return snap[:len(snap)-1]
	case "truncate-boundary":
		// Drop the last record whole: every remaining record is intact.
		return bytes.Join(recs[:len(recs)-1], nil)
	case "version":
		return replaceHeader(t, recs, &pb.SnapshotHeader{Version: fsm.SnapshotVersion + 1})
	case "version-zero":
		return replaceHeader(t, recs, &pb.SnapshotHeader{})
	case "garbage-record":
		// A record, before the end record, whose length prefix is fine but
		// whose body is not a SnapshotRecord (field 2 with wire type 7).
		return beforeEnd(recs, []byte{0x01, 0x17})
	case "empty-record":
		return beforeEnd(recs, []byte{0x00})
	case "huge-length":
		return beforeEnd(recs, []byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	case "rows-swapped":
		// Swap the first two rows (records 1 and 2): out of key order.
		swapped := append([][]byte{recs[0], recs[2], recs[1]}, recs[3:]...)
		return bytes.Join(swapped, nil)
	case "record-after-end":
		// Repeat the first row after the end record.
		return append(bytes.Join(recs, nil), recs[1]...)
	}
	td.Fatalf(t, "unknown corruption %q", kind)
	return nil
}

// beforeEnd is the stream recs with b inserted before its last record.
func beforeEnd(recs [][]byte, b []byte) []byte {
	last := len(recs) - 1
	return slices.Concat(bytes.Join(recs[:last], nil), b, recs[last])
}

// splitRecords cuts a snapshot stream into its length-delimited messages,
// header first, each with its length prefix.
func splitRecords(t *testing.T, snap []byte) [][]byte {
	var recs [][]byte
	for off := 0; off < len(snap); {
		size, n := protowire.ConsumeVarint(snap[off:])
		if n <= 0 {
			t.Fatalf("bad length prefix at byte %d", off)
		}
		end := off + n + int(size)
		recs = append(recs, snap[off:end])
		off = end
	}
	return recs
}

func replaceHeader(t *testing.T, recs [][]byte, hdr *pb.SnapshotHeader) []byte {
	var buf bytes.Buffer
	if _, err := protodelim.MarshalTo(&buf, hdr); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[1:] {
		buf.Write(r)
	}
	return buf.Bytes()
}

// describeSnapshot summarizes a snapshot stream: header version and the
// records in order.
func describeSnapshot(t *testing.T, snap []byte) string {
	r := bufio.NewReader(bytes.NewReader(snap))
	var hdr pb.SnapshotHeader
	if err := protodelim.UnmarshalFrom(r, &hdr); err != nil {
		t.Fatalf("header: %v", err)
	}
	parts := []string{fmt.Sprintf("v%d", hdr.GetVersion())}
	for {
		var rec pb.SnapshotRecord
		err := protodelim.UnmarshalFrom(r, &rec)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("record: %v", err)
		}
		switch x := rec.GetRecord().(type) {
		case *pb.SnapshotRecord_Row:
			parts = append(parts, x.Row.GetTable()+":"+rowID(t, x.Row))
		case *pb.SnapshotRecord_TableIndex:
			parts = append(parts, fmt.Sprintf("index:%s=%d", x.TableIndex.GetTable(), x.TableIndex.GetIndex()))
		case *pb.SnapshotRecord_End:
			parts = append(parts, fmt.Sprintf("end:%d", x.End.GetRecords()))
		default:
			t.Fatalf("unexpected record %v", &rec)
		}
	}
	return strings.Join(parts, " ")
}

// rowID decodes a snapshot row and returns its key (a job version's as
// id@version).
func rowID(t *testing.T, row *pb.TableRow) string {
	var m proto.Message
	switch row.GetTable() {
	case fsm.TableNodes:
		m = &pb.Node{}
	case fsm.TableServers:
		m = &pb.ServerMember{}
	case fsm.TableJobs, fsm.TableJobVersions:
		m = &pb.Job{}
	case fsm.TableEvals:
		m = &pb.Evaluation{}
	case fsm.TableAllocs:
		m = &pb.Allocation{}
	case fsm.TableNodeAllocIndex:
		m = &pb.TableIndex{}
	case fsm.TableCSIPlugins:
		m = &pb.CSIPlugin{}
	case fsm.TableCSIPluginInstances:
		m = &pb.CSIPluginInstance{}
	case fsm.TableCSIPluginAllocs:
		m = &pb.CSIPluginAllocRow{}
	case fsm.TableVolumes:
		m = &pb.Volume{}
	case fsm.TableClaims:
		m = &pb.Claim{}
	case fsm.TableAttachments:
		m = &pb.Attachment{}
	default:
		t.Fatalf("row of unexpected table %q", row.GetTable())
	}
	if err := proto.Unmarshal(row.GetRow(), m); err != nil {
		t.Fatalf("%s row: %v", row.GetTable(), err)
	}
	switch r := m.(type) {
	case *pb.Job:
		if row.GetTable() == fsm.TableJobVersions {
			return fmt.Sprintf("%s@%d", r.GetId(), r.GetVersion())
		}
		return r.GetId()
	case *pb.TableIndex:
		return r.GetTable()
	case *pb.Attachment:
		return r.GetVolumeId() + "/" + r.GetNodeId()
	case *pb.CSIPluginInstance:
		side := "node"
		if r.GetController() {
			side = "controller"
		}
		return r.GetPluginId() + "/" + side + "/" + r.GetNodeId()
	case *pb.CSIPluginAllocRow:
		return r.GetPluginId() + "/" + r.GetAlloc().GetAllocId()
	case interface{ GetId() string }:
		return r.GetId()
	}
	return ""
}

// roundtrip restores a snapshot of f into a fresh FSM and compares every
// object and index; it returns "identical" or what differs.
func roundtrip(t *testing.T, f *fsm.FSM) string {
	fresh := fsm.New(testLogger(t))
	if err := restoreBytes(fresh, snapshotBytes(t, f)); err != nil {
		return fmt.Sprintf("restore failed: %v", err)
	}
	want, err := dumpState(f.State())
	if err != nil {
		t.Fatal(err)
	}
	got, err := dumpState(fresh.State())
	if err != nil {
		t.Fatal(err)
	}
	if want != got {
		return fmt.Sprintf("differs:\n--- original\n%s--- restored\n%s", want, got)
	}
	wantNodes, _ := f.State().Nodes(nil)
	gotNodes, _ := fresh.State().Nodes(nil)
	for i := range wantNodes {
		if !proto.Equal(wantNodes[i], gotNodes[i]) {
			return fmt.Sprintf("node %s differs: %v vs %v", wantNodes[i].GetId(), wantNodes[i], gotNodes[i])
		}
	}
	wantServers, _ := f.State().Servers(nil)
	gotServers, _ := fresh.State().Servers(nil)
	for i := range wantServers {
		if !proto.Equal(wantServers[i], gotServers[i]) {
			return fmt.Sprintf("server %s differs: %v vs %v", wantServers[i].GetId(), wantServers[i], gotServers[i])
		}
	}
	return "identical"
}

func argString(t *testing.T, td *datadriven.TestData, key, def string) string {
	if !td.HasArg(key) {
		return def
	}
	var v string
	td.ScanArgs(t, key, &v)
	return v
}

func argInt(t *testing.T, td *datadriven.TestData, key string, def int64) int64 {
	if !td.HasArg(key) {
		return def
	}
	var v string
	td.ScanArgs(t, key, &v)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		td.Fatalf(t, "%s=%q: %v", key, v, err)
	}
	return n
}

func argStatus(t *testing.T, td *datadriven.TestData, key string, def pb.NodeStatus) pb.NodeStatus {
	if !td.HasArg(key) {
		return def
	}
	switch v := argString(t, td, key, ""); v {
	case "ready":
		return pb.NodeStatus_NODE_STATUS_READY
	case "down":
		return pb.NodeStatus_NODE_STATUS_DOWN
	case "unspecified":
		return pb.NodeStatus_NODE_STATUS_UNSPECIFIED
	default:
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			td.Fatalf(t, "%s=%q: want ready, down, unspecified or a number", key, v)
		}
		return pb.NodeStatus(n)
	}
}
