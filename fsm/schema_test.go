package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/pb"
)

// TestProductionTables checks the tables New builds: distinct names, none
// called like the index table, each holding the message type it was
// declared with. Restore decodes a table's rows into messageType and
// stores them with restoreRow: a row of that type must reach the key
// check, not be refused as a row of another type.
func TestProductionTables(t *testing.T) {
	want := map[string]protoreflect.FullName{
		TableNodes:              "berth.v1.Node",
		TableServers:            "berth.v1.ServerMember",
		TableJobs:               "berth.v1.Job",
		TableJobVersions:        "berth.v1.Job",
		TableEvals:              "berth.v1.Evaluation",
		TableAllocs:             "berth.v1.Allocation",
		TableNodeAllocIndex:     "berth.v1.TableIndex",
		TableCSIPlugins:         "berth.v1.CSIPlugin",
		TableCSIPluginInstances: "berth.v1.CSIPluginInstance",
		TableCSIPluginAllocs:    "berth.v1.CSIPluginAllocRow",
		TableVolumes:            "berth.v1.Volume",
		TableClaims:             "berth.v1.Claim",
		TableAttachments:        "berth.v1.Attachment",
		TableHostVolumes:        "berth.v1.HostVolume",
		TableACLPolicies:        "berth.v1.ACLPolicy",
		TableACLTokens:          "berth.v1.ACLToken",
		TableACLBootstrap:       "berth.v1.TableIndex",
	}
	seen := map[string]bool{tableIndex: true}
	st := newStateStore(productionSchema())
	txn := st.db.Txn(true)
	defer txn.Abort()
	for _, tbl := range productionSchema().tables {
		name := tbl.tableName()
		if seen[name] {
			t.Errorf("table name %q is used twice", name)
		}
		seen[name] = true
		if got := tbl.messageType().Descriptor().FullName(); got != want[name] {
			t.Errorf("table %s holds %s, want %q", name, got, want[name])
		}
		_, err := tbl.restoreRow(txn, tbl.messageType().New().Interface(), nil)
		if err == nil || !strings.Contains(err.Error(), "without a complete key") {
			t.Errorf("table %s: restoring an empty row of its message type: %v, want a refusal of its empty key", name, err)
		}
	}
	if len(seen) != len(want)+1 {
		t.Errorf("%d production tables, the test knows %d: add the new one to want", len(seen)-1, len(want))
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
