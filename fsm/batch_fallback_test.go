package fsm

import (
	"errors"
	"testing"

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
	s := productionSchema()
	s.commands = map[MessageType]command{
		NodeRegister: commands[NodeRegister],
		writeThenFail: newCommand("WriteThenFail", func(tx *writeTxn, cmd *pb.NodeRegisterCommand) error {
			if err := nodesTable.insert(tx, cmd.GetNode()); err != nil {
				return err
			}
			return errAfterWrite
		}),
	}
	entry := func(index uint64, typ MessageType, id string) *raft.Log {
		body, err := proto.Marshal(&pb.NodeRegisterCommand{Node: &pb.Node{Id: id, Status: pb.NodeStatus_NODE_STATUS_READY}})
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Index: index, Type: raft.LogCommand, Data: append([]byte{byte(typ)}, body...)}
	}
	logs := []*raft.Log{
		entry(1, NodeRegister, "before"),
		entry(2, writeThenFail, "half"),
		entry(3, NodeRegister, "after"),
	}
	f := newFSM(nil, s)
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
	// Nothing of the discarded attempt may leak into the node the retry
	// stores.
	if !proto.Equal(nodes[1], &pb.Node{Id: "before", Status: pb.NodeStatus_NODE_STATUS_READY,
		Eligibility: pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE, CreateIndex: 1, ModifyIndex: 1}) {
		t.Errorf("node before = %v", nodes[1])
	}
}
