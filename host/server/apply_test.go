package server

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

func TestTimedFSMAppliesBatchesWithPerEntryResults(t *testing.T) {
	tf := &timedFSM{fsm: fsm.New(nil)}
	good := testNode("batched")
	goodBuf, err := fsm.Encode(nodeRegister(good))
	if err != nil {
		t.Fatal(err)
	}
	badBuf, err := fsm.Encode(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
		NodeId: "no-such-node", Status: pb.NodeStatus_NODE_STATUS_DOWN,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := tf.ApplyBatch([]*raft.Log{
		{Index: 10, Type: raft.LogCommand, Data: goodBuf},
		{Index: 11, Type: raft.LogConfiguration},
		{Index: 12, Type: raft.LogCommand, Data: badBuf},
	})
	if len(out) != 3 {
		t.Fatalf("%d results for 3 entries", len(out))
	}
	if r, ok := out[0].(*fsm.ApplyResult); !ok || r.Err != nil || r.Index != 10 {
		t.Fatalf("first result %#v", out[0])
	}
	if r, ok := out[2].(*fsm.ApplyResult); !ok || !errors.Is(r.Err, fsm.ErrNodeNotFound) {
		t.Fatalf("refused command's result %#v", out[2])
	}
	n, err := tf.fsm.State().NodeByID(nil, good.GetId())
	if err != nil || n == nil || n.GetCreateIndex() != 10 {
		t.Fatalf("batched node %v, %v", n, err)
	}
}
