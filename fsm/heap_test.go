package fsm_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// capturedDevNode is the node a dev agent registered
// (internal/bench/testdata/dev-node.json), without the indexes the FSM
// assigns, as the raft bench proposes it.
func capturedDevNode(t testing.TB) *pb.Node {
	t.Helper()
	raw, err := os.ReadFile("../internal/bench/testdata/dev-node.json")
	if err != nil {
		t.Fatal(err)
	}
	n := &pb.Node{}
	if err := protojson.Unmarshal(raw, n); err != nil {
		t.Fatalf("dev-node.json: %v", err)
	}
	n.CreateIndex, n.ModifyIndex = 0, 0
	return n
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkStoredNodesHeap measures the heap a state store keeps for 10,000
// registrations of the captured dev node, per node, right after the batched
// registrations. Rows are the decoded messages, so reads add nothing to it.
// Entries are built and dropped batch by batch, so only what the store
// retains is counted. The figure does not depend on b.N.
func BenchmarkStoredNodesHeap(b *testing.B) {
	const nodes, batch = 10_000, 64
	dev := capturedDevNode(b)
	for range b.N {
		base := liveHeap()
		f := fsm.New(nil)
		logs := make([]*raft.Log, 0, batch)
		for start := 0; start < nodes; start += batch {
			logs = logs[:0]
			for i := start; i < min(start+batch, nodes); i++ {
				n := proto.CloneOf(dev)
				n.Id = fmt.Sprintf("00000000-0000-4000-8000-%012x", i)
				data, err := fsm.Encode(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
				if err != nil {
					b.Fatal(err)
				}
				logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
			}
			for _, r := range f.ApplyBatch(logs) {
				if res, ok := r.(*fsm.ApplyResult); !ok || res.Err != nil {
					b.Fatalf("result %#v", r)
				}
			}
		}
		clear(logs)
		stored := liveHeap() - base
		if all, err := f.State().Nodes(nil); err != nil || len(all) != nodes {
			b.Fatalf("%d nodes (%v), want %d", len(all), err, nodes)
		}
		runtime.KeepAlive(f)
		b.ReportMetric(float64(stored)/nodes, "stored-B/node")
	}
}
