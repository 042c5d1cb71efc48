package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"

	"berth.dev/berth/rpc/pb"
)

// TestProductionTables checks the tables New builds: distinct names, none
// called like the index table, each holding its own message type.
func TestProductionTables(t *testing.T) {
	seen := map[string]bool{tableIndex: true}
	for _, tbl := range productionSchema().tables {
		if seen[tbl.tableName()] {
			t.Errorf("table name %q is used twice", tbl.tableName())
		}
		seen[tbl.tableName()] = true
		if tbl.messageType() == nil {
			t.Errorf("table %s has no message type", tbl.tableName())
		}
	}
	if _, err := memdb.NewMemDB(productionSchema().memdb()); err != nil {
		t.Errorf("the production tables make an invalid memdb schema: %v", err)
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
