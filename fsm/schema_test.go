package fsm

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"berth.dev/berth/rpc/pb"
)

// TestSnapshotCoversEveryTable guards the rule that a table added to the
// registry is also in the current snapshot version, and that the version's
// table list names only real tables: otherwise a snapshot would silently
// drop rows, or every restore would fail.
func TestSnapshotCoversEveryTable(t *testing.T) {
	current := snapshotTables[SnapshotVersion]
	for _, spec := range tables {
		if !slices.Contains(current, spec.name) {
			t.Errorf("table %s is not in snapshot version %d: add it (with a new version)", spec.name, SnapshotVersion)
		}
	}
	for _, name := range current {
		if _, ok := tableNamed(name); !ok {
			t.Errorf("snapshot version %d names table %s, which is not registered", SnapshotVersion, name)
		}
	}
	for v := uint32(1); v <= SnapshotVersion; v++ {
		if _, ok := snapshotTables[v]; !ok {
			t.Errorf("snapshot version %d has no table list: Restore could not read it", v)
		}
	}
}

// TestCommandTableNames checks every command has a distinct metric name, a
// message type, and a number other than 0.
func TestCommandTableNames(t *testing.T) {
	seen := map[string]MessageType{}
	for typ, c := range commands {
		if typ == 0 {
			t.Errorf("command %s uses type 0, which PeekType reports for empty entries", c.name)
		}
		if other, dup := seen[c.name]; dup {
			t.Errorf("types %d and %d share the name %s", other, typ, c.name)
		}
		seen[c.name] = typ
		if c.message == nil {
			t.Errorf("%s has no message type", c.name)
		}
	}
}

// TestDataTableRefusesAMismatchedSnapshotField checks that a table whose
// snapshot field holds another message type is caught when the table is
// declared, not when a restore checks its rows against the wrong type.
func TestDataTableRefusesAMismatchedSnapshotField(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("dataTable accepted nodes carried in SnapshotRecord.server")
		}
	}()
	dataTable(TableNodes, (*pb.Node)(nil), "id", "server")
}

// TestOversizedRowIsRefusedBeforeWriting stores a node whose encoding
// exceeds what a snapshot record may hold: the command is refused as
// invalid, in a batch too, and nothing is written.
func TestOversizedRowIsRefusedBeforeWriting(t *testing.T) {
	huge := &pb.Node{Id: "big", Name: "big", Status: pb.NodeStatus_NODE_STATUS_READY,
		Fingerprint: &pb.NodeFingerprint{Attributes: map[string]string{"blob": strings.Repeat("x", maxRowBytes)}}}
	data, err := Encode(NodeRegister, &pb.NodeRegisterCommand{Node: huge})
	if err != nil {
		t.Fatal(err)
	}
	small, err := Encode(NodeRegister, &pb.NodeRegisterCommand{Node: &pb.Node{Id: "small", Status: pb.NodeStatus_NODE_STATUS_READY}})
	if err != nil {
		t.Fatal(err)
	}
	f := New(nil)
	out := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: data},
		{Index: 2, Type: raft.LogCommand, Data: small},
	})
	if res := out[0].(*ApplyResult); !errors.Is(res.Err, ErrInvalidCommand) || !strings.Contains(res.Err.Error(), `nodes row "big"`) {
		t.Errorf("oversized node: %v, want ErrInvalidCommand naming the row", res.Err)
	}
	if res := out[1].(*ApplyResult); res.Err != nil {
		t.Errorf("the next command in the batch: %v", res.Err)
	}
	if n, _ := f.State().NodeByID(nil, "big"); n != nil {
		t.Error("the oversized node was stored")
	}
	if n, _ := f.State().NodeByID(nil, "small"); n == nil {
		t.Error("the batch's other node was not stored")
	}
}
