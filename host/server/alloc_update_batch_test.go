package server

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// TestManyNodesAllocUpdatesShareRaftEntries: forty nodes report their
// allocs running at once, through the leader and both followers, while
// the first entries are held in the state machine: the leader proposes the
// waiting reports together, in fewer entries than nodes, every node is
// answered only once its report is applied on the leader, and a node that
// reports an alloc of another node is refused alone, with an error naming
// both nodes and the alloc, while the reports batched with it apply.
func TestManyNodesAllocUpdatesShareRaftEntries(t *testing.T) {
	const nodes = 40
	var (
		proposed atomic.Int32
		hold     = make(chan struct{})
		holdOnce sync.Once
		mu       sync.Mutex
		parts    = map[uint64]int{} // entry index → nodes in it
	)
	tc := newTestCluster(t, 3, func(c *testConfig) {
		c.hooks = &testHooks{
			proposing: func(typ fsm.MessageType) {
				if typ == fsm.AllocClientUpdate {
					proposed.Add(1)
				}
			},
			beforeApply: func(logs []*raft.Log) {
				for _, l := range logs {
					if l.Type != raft.LogCommand || fsm.PeekType(l.Data) != fsm.AllocClientUpdate {
						continue
					}
					<-hold
					_, msg, err := fsm.Decode(l.Data)
					if err != nil {
						t.Error(err)
						continue
					}
					cmd := msg.(*pb.AllocClientUpdateCommand)
					mu.Lock()
					parts[l.Index] = max(len(cmd.GetBatch()), 1)
					mu.Unlock()
				}
			},
		}
	})
	t.Cleanup(func() { holdOnce.Do(func() { close(hold) }) })
	leader := tc.waitLeader()
	// Batched entries wait for every server's version (the gate).
	waitVersions(tc, leader)
	var ns []*pb.Node
	for i := range nodes {
		ns = append(ns, workNode(fmt.Sprintf("n%02d", i)))
	}
	registerNodes(t, tc, leader, ns...)
	registerJob(t, tc, leader, serviceJob("web", nodes))
	allocs := waitAllocs(t, tc, leader, "web", nodes, nil)
	byNode := map[string][]*pb.Allocation{}
	for _, a := range allocs {
		byNode[a.GetNodeId()] = append(byNode[a.GetNodeId()], a)
	}
	// n00 reports an alloc of another node: refused, alone.
	var wrongOwner *pb.Allocation
	for _, a := range allocs {
		if a.GetNodeId() != ns[0].GetId() {
			wrongOwner = a
			break
		}
	}

	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i, n := range ns {
		report := byNode[n.GetId()]
		if i == 0 {
			report = []*pb.Allocation{wrongOwner}
		}
		var ups []*pb.AllocClientUpdate
		for _, a := range report {
			ups = append(ups, &pb.AllocClientUpdate{AllocId: a.GetId(), ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING})
		}
		via := tc.servers[i%len(tc.servers)]
		wg.Go(func() {
			_, errs[i] = pb.NewClientAllocsClient(tc.conn(via)).Update(ctx10s(t), &pb.ClientAllocUpdateRequest{NodeId: n.GetId(), Updates: ups})
		})
	}
	// The first entries wait in the state machine; the rest queue behind.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if p := proposed.Load(); p < 2 {
			return fmt.Errorf("%d alloc update entries proposed", p)
		}
		return nil
	})
	holdOnce.Do(func() { close(hold) })
	wg.Wait()

	for i, err := range errs {
		if i == 0 {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), wrongOwner.GetId()) ||
				!strings.Contains(err.Error(), ns[0].GetId()) || !strings.Contains(err.Error(), wrongOwner.GetNodeId()) {
				t.Errorf("node reporting another node's alloc: %v; want InvalidArgument naming alloc %s and nodes %s, %s",
					err, wrongOwner.GetId(), ns[0].GetId(), wrongOwner.GetNodeId())
			}
			continue
		}
		if err != nil {
			t.Errorf("node %s: %v", ns[i].GetId(), err)
		}
	}
	// Answered means applied on the leader.
	for _, a := range allocs {
		got, err := leader.State().AllocByID(nil, a.GetId())
		if err != nil {
			t.Fatal(err)
		}
		want := pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING
		if a.GetNodeId() == ns[0].GetId() {
			want = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
		}
		if got.GetClientStatus() != want {
			t.Errorf("alloc %s on %s is %s, want %s", a.GetId(), a.GetNodeId(), got.GetClientStatus(), want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	entries, most := 0, 0
	seen := map[uint64]bool{}
	for idx, n := range parts {
		if !seen[idx] {
			seen[idx] = true
			entries++
			most = max(most, n)
		}
	}
	if p := proposed.Load(); int(p) >= nodes || most < 2 {
		t.Fatalf("%d nodes' reports took %d proposals, %d entries, at most %d nodes in one; want them batched", nodes, p, entries, most)
	}
	t.Logf("%d nodes' reports: %d proposals, %d entries, up to %d nodes in one", nodes, proposed.Load(), entries, most)
}
