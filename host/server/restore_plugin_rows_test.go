package server

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// TestOperatorRestoreRefusesCorruptPluginRows: an operator's archive whose
// state holds a plugin instance row without its plugin row is refused
// (fsm.RestoreStrict in readArchive), though raft's own restore of the
// same state rebuilds the rows rather than keep a server from starting.
func TestOperatorRestoreRefusesCorruptPluginRows(t *testing.T) {
	var state bytes.Buffer
	inst, err := proto.Marshal(&pb.CSIPluginInstance{PluginId: "ghost", NodeId: "n1", Info: &pb.CSIPluginInfo{PluginId: "ghost", Healthy: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []proto.Message{
		&pb.SnapshotHeader{Version: fsm.SnapshotVersion},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_Row{Row: &pb.TableRow{Table: fsm.TableCSIPluginInstances, Row: inst}}},
		&pb.SnapshotRecord{Record: &pb.SnapshotRecord_End{End: &pb.SnapshotEnd{Records: 1}}},
	} {
		if _, err := protodelim.MarshalTo(&state, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := fsm.New(nil).Restore(io.NopCloser(bytes.NewReader(state.Bytes()))); err != nil {
		t.Fatalf("raft's restore of the state: %v, want the rows rebuilt", err)
	}
	var archive bytes.Buffer
	meta := &raft.SnapshotMeta{Version: 1, ID: "orphan", Index: 5, Term: 1, Size: int64(state.Len())}
	if err := writeArchive(&archive, meta, bytes.NewReader(state.Bytes())); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "archive")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(archive.Bytes()); err != nil {
		t.Fatal(err)
	}
	_, _, err = readArchive(f)
	if !errors.Is(err, ErrBadArchive) || !strings.Contains(err.Error(), "has no csi_plugins row") {
		t.Fatalf("readArchive = %v, want ErrBadArchive naming the orphan row", err)
	}
}
