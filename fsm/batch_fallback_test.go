package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// writeThenFail is a command type used only here: its apply function stores
// the node and then refuses, the half-done failure memdb cannot undo inside
// a shared transaction.
const writeThenFail MessageType = 0x7e

var errAfterWrite = errors.New("refused after writing")

// TestApplyBatchFallsBackAfterPartialWrite checks that a command failing
// after it wrote makes the batch redo itself one transaction per command:
// the failing command leaves no trace, the others all apply, and every
// result is what applying the entry alone gives.
func TestApplyBatchFallsBackAfterPartialWrite(t *testing.T) {
	if _, taken := commands[writeThenFail]; taken {
		t.Fatalf("command type %d is in use; pick another for this test", writeThenFail)
	}
	commands[writeThenFail] = newCommand("WriteThenFail", func(tx *writeTxn, cmd *pb.NodeRegisterCommand) error {
		r, err := messageRow(cmd.GetNode().GetId(), cmd.GetNode())
		if err != nil {
			return err
		}
		if err := storeNode(tx, r); err != nil {
			return err
		}
		return errAfterWrite
	})
	t.Cleanup(func() { delete(commands, writeThenFail) })

	entry := func(index uint64, typ MessageType, id string) *raft.Log {
		data, err := Encode(typ, &pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Status: pb.NodeStatus_NODE_STATUS_READY}})
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
	}
	logs := []*raft.Log{
		entry(1, NodeRegister, "before"),
		entry(2, writeThenFail, "half"),
		entry(3, NodeRegister, "after"),
	}
	f := New(nil)
	out := f.ApplyBatch(logs)
	for i, want := range []error{nil, errAfterWrite, nil} {
		res, ok := out[i].(*ApplyResult)
		if !ok || res.Index != logs[i].Index || !errors.Is(res.Err, want) || (want == nil) != (res.Err == nil) {
			t.Errorf("entry %d: response %#v, want index %d and error %v", i, out[i], logs[i].Index, want)
		}
	}
	nodes, err := f.State().Nodes(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.GetId())
		if n.GetId() == "after" && (n.GetCreateIndex() != 3 || n.GetModifyIndex() != 3) {
			t.Errorf("node after: create %d modify %d, want 3 and 3", n.GetCreateIndex(), n.GetModifyIndex())
		}
	}
	if len(ids) != 2 || ids[0] != "after" || ids[1] != "before" {
		t.Errorf("nodes after the batch = %v, want [after before]: the half-written node must leave no trace", ids)
	}
	if idx, _ := f.State().Index(TableNodes); idx != 3 {
		t.Errorf("nodes index = %d, want 3", idx)
	}
	// Nothing of the discarded attempt may leak into the messages the
	// retry decodes afresh.
	if !proto.Equal(nodes[1], &pb.Node{Id: "before", Status: pb.NodeStatus_NODE_STATUS_READY, CreateIndex: 1, ModifyIndex: 1}) {
		t.Errorf("node before = %v", nodes[1])
	}
}

// TestKeyIndexesMatchMemdb pins the keys of the reflection-free indexes to
// memdb.StringFieldIndex's: a snapshot or a lookup must find rows the same
// way whichever built the key.
func TestKeyIndexesMatchMemdb(t *testing.T) {
	theirs := &memdb.StringFieldIndex{Field: "Table"}
	for _, id := range []string{"n1", "", "with\x00nul", "ünïcode"} {
		ti := &pb.TableIndex{Table: id}
		ok2, k2, err2 := theirs.FromObject(ti)
		for name, ours := range map[string]interface {
			memdb.SingleIndexer
			FromArgs(...any) ([]byte, error)
		}{"rowKeyIndex": rowKeyIndex{}, "stringKeyIndex": stringKeyIndex[*pb.TableIndex]{key: (*pb.TableIndex).GetTable}} {
			var obj any = ti
			if name == "rowKeyIndex" {
				obj = rawRow(id, nil)
			}
			ok1, k1, err1 := ours.FromObject(obj)
			if ok1 != ok2 || string(k1) != string(k2) || (err1 == nil) != (err2 == nil) {
				t.Errorf("%s.FromObject(%q): ours %t %q %v, memdb %t %q %v", name, id, ok1, k1, err1, ok2, k2, err2)
			}
			a1, err1 := ours.FromArgs(id)
			a2, err2 := theirs.FromArgs(id)
			if string(a1) != string(a2) || err1 != nil || err2 != nil {
				t.Errorf("%s.FromArgs(%q): ours %q %v, memdb %q %v", name, id, a1, err1, a2, err2)
			}
			if _, _, err := ours.FromObject(&pb.ServerMember{Id: "s1"}); err == nil {
				t.Errorf("%s.FromObject accepted a row of the wrong type", name)
			}
			for _, args := range [][]any{{}, {"a", "b"}, {42}} {
				if _, err := ours.FromArgs(args...); err == nil {
					t.Errorf("%s.FromArgs(%v) succeeded", name, args)
				}
			}
		}
	}
}
