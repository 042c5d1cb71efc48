package fsm_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// stream builds a snapshot stream from messages, each length-delimited.
func stream(t *testing.T, msgs ...proto.Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, m := range msgs {
		if _, err := protodelim.MarshalTo(&buf, m); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func nodeRec(n *pb.Node) *pb.SnapshotRecord {
	return &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Node{Node: n}}
}

// rawRec is a record whose encoding is b exactly, for records Persist never
// writes.
func rawRec(b []byte) *pb.SnapshotRecord {
	rec := &pb.SnapshotRecord{}
	rec.ProtoReflect().SetUnknown(b)
	return rec
}

func indexRec(table string, index uint64) *pb.SnapshotRecord {
	return &pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{TableIndex: &pb.TableIndex{Table: table, Index: index}}}
}

// TestRestoreRejectsBadRows covers streams that decode record by record but
// cannot be a snapshot this package wrote.
func TestRestoreRejectsBadRows(t *testing.T) {
	hdr := &pb.SnapshotHeader{Version: fsm.SnapshotVersion}
	trailer := []proto.Message{indexRec(fsm.TableNodes, 5), indexRec(fsm.TableServers, 0)}
	for _, tc := range []struct {
		name    string
		msgs    []proto.Message
		mention string
	}{
		{"node without ID", append([]proto.Message{hdr, nodeRec(&pb.Node{Name: "anon"})}, trailer...), "record 1: nodes row without a key"},
		// Field 2 (node) twice: two rows in one record.
		{"two rows in a record", append([]proto.Message{hdr, rawRec([]byte{0x12, 0x03, 0x0a, 0x01, 'a', 0x12, 0x03, 0x0a, 0x01, 'b'})}, trailer...), "record 1: record holds 2 fields"},
		// A node whose ID is not UTF-8: the row would never decode.
		{"node not decodable", append([]proto.Message{hdr, rawRec([]byte{0x12, 0x03, 0x0a, 0x01, 0xff})}, trailer...), "Node.id: invalid protobuf encoding: string is not valid UTF-8"},
		// Field 9, which no version has written.
		{"unknown record", append([]proto.Message{hdr, rawRec([]byte{0x4a, 0x01, 'x'})}, trailer...), "record 1: record holds no row this version knows"},
		{"empty record", append([]proto.Message{hdr, &pb.SnapshotRecord{}}, trailer...), "record 1: empty record"},
		{"index of unknown table", append([]proto.Message{hdr, indexRec("jobs", 3)}, trailer...), `unknown table "jobs"`},
		{"duplicate index", append([]proto.Message{hdr}, append(trailer, indexRec(fsm.TableNodes, 6))...), "second index record for table nodes"},
		{"no trailer", []proto.Message{hdr, nodeRec(&pb.Node{Id: "n1"})}, "without the index record of table nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fsm.New(testLogger(t))
			applyOK(t, f, 1, fsm.NodeRegister, registerCmd("keep", "k", pb.NodeStatus_NODE_STATUS_READY))
			before := f.State()
			err := restoreBytes(f, stream(t, tc.msgs...))
			if !errors.Is(err, fsm.ErrSnapshotCorrupt) {
				t.Fatalf("Restore = %v, want ErrSnapshotCorrupt", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
			if n, _ := f.State().NodeByID(nil, "keep"); f.State() != before || n == nil {
				t.Error("a refused restore replaced the state")
			}
		})
	}
}

// TestRestoreAcceptsHandWrittenStream pins the stream format: a stream
// written from the documented layout, not by Persist, restores.
func TestRestoreAcceptsHandWrittenStream(t *testing.T) {
	f := fsm.New(testLogger(t))
	err := restoreBytes(f, stream(t,
		&pb.SnapshotHeader{Version: 1},
		nodeRec(&pb.Node{Id: "n1", Status: pb.NodeStatus_NODE_STATUS_READY, CreateIndex: 2, ModifyIndex: 5}),
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Server{Server: &pb.ServerMember{Id: "s1", CreateIndex: 3, ModifyIndex: 3}}},
		indexRec(fsm.TableNodes, 5),
		indexRec(fsm.TableServers, 3),
	))
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	got, err := dumpState(f.State())
	if err != nil {
		t.Fatal(err)
	}
	want := "index: nodes=5 servers=3 latest=5\n" +
		"node n1: name= status=ready updated=0 registered=0 create=2 modify=5\n" +
		"server s1: name= rpc= raft= http= version= create=3 modify=3\n"
	if got != want {
		t.Errorf("restored state:\n%s\nwant:\n%s", got, want)
	}
}

// closeRecorder records whether Restore closed its input.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestRestoreClosesInput(t *testing.T) {
	f := fsm.New(testLogger(t))
	for _, in := range [][]byte{snapshotBytes(t, f), []byte("junk")} {
		rc := &closeRecorder{Reader: bytes.NewReader(in)}
		_ = f.Restore(rc)
		if !rc.closed {
			t.Errorf("Restore(%q) did not close its input", in)
		}
	}
}

// failingSink fails every write after the first n bytes.
type failingSink struct {
	memSink
	n int
}

func (s *failingSink) Write(p []byte) (int, error) {
	if s.Len()+len(p) > s.n {
		return 0, errors.New("disk full")
	}
	return s.memSink.Write(p)
}

func TestPersistCancelsSinkOnError(t *testing.T) {
	f := fsm.New(testLogger(t))
	for i := range 200 {
		applyOK(t, f, uint64(i+1), fsm.NodeRegister, &pb.NodeRegisterCommand{Node: fullNode(string(rune('a'+i%26)) + strings.Repeat("x", i))})
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &failingSink{n: 10}
	err = snap.Persist(sink)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Persist = %v, want the sink's error", err)
	}
	if !sink.cancelled || sink.closed {
		t.Errorf("sink cancelled=%v closed=%v, want cancelled only", sink.cancelled, sink.closed)
	}
}
