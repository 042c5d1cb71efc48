package server

import (
	"context"
	"testing"
	"time"

	"berth.dev/berth/rpc/pb"
)

// A node with no allocs, whose client holds none, sleeps through
// placements on other nodes and wakes for its own. Before, the first row
// of node_alloc_index written for another node (a memdb read of a missing
// row watches the radix tree above it) woke it with an empty answer and a
// newer index, and on a large cluster every idle node's watch came back
// over and over.
func TestIdleNodeWatchSleepsThroughOtherNodesPlacements(t *testing.T) {
	tc := newTestCluster(t, 1)
	s := tc.servers[0]
	idle, busy := workNode("idle"), workNode("busy")
	registerNodes(t, tc, s, idle, busy)
	ops := pb.NewNodeOpsClient(tc.conn(s))
	eligible := func(n *pb.Node, e pb.NodeEligibility) {
		t.Helper()
		if _, err := ops.UpdateEligibility(ctx10s(t), &pb.NodeEligibilityRequest{NodeId: n.GetId(), Eligibility: e}); err != nil {
			t.Fatal(err)
		}
	}
	eligible(idle, pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE)

	watch := pb.NewClientAllocsClient(tc.conn(s))
	first, err := watch.Watch(ctx10s(t), &pb.ClientAllocsRequest{NodeId: idle.GetId(), Paged: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.GetAllocs()) != 0 {
		t.Fatalf("idle node has %d allocs", len(first.GetAllocs()))
	}
	type answer struct {
		resp *pb.ClientAllocsResponse
		err  error
	}
	answered := make(chan answer, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		r, err := watch.Watch(ctx, &pb.ClientAllocsRequest{NodeId: idle.GetId(), Paged: true,
			Query: &pb.QueryOptions{MinIndex: first.GetMeta().GetIndex(), MaxWaitMs: 60_000}})
		answered <- answer{r, err}
	}()

	// Placements on the other node only.
	registerJob(t, tc, s, serviceJob("elsewhere", 3))
	waitAllocs(t, tc, s, "elsewhere", 3, nil)
	select {
	case a := <-answered:
		t.Fatalf("the idle node's watch answered for another node's placements: %d allocs, index %d, err %v",
			len(a.resp.GetAllocs()), a.resp.GetMeta().GetIndex(), a.err)
	default:
	}

	// Its own placement wakes it.
	eligible(busy, pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE)
	eligible(idle, pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE)
	registerJob(t, tc, s, serviceJob("here", 1))
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	if len(a.resp.GetAllocs()) != 1 || a.resp.GetAllocs()[0].GetJobId() != "here" || a.resp.GetMeta().GetIndex() <= first.GetMeta().GetIndex() {
		t.Fatalf("the idle node's watch answered %d allocs at index %d (first answer at %d), want job here's alloc at a newer index",
			len(a.resp.GetAllocs()), a.resp.GetMeta().GetIndex(), first.GetMeta().GetIndex())
	}
}
