package main

import (
	"maps"
	"testing"

	"berth.dev/berth/rpc/pb"
)

// The alloc updates an Update call carries are counted by client status;
// other calls count none, and the calls per second leave them out.
func TestAllocUpdatesCounted(t *testing.T) {
	c := newCallCounter(nil)
	before := c.snapshot()
	countAllocUpdates(c, &pb.ClientAllocUpdateRequest{NodeId: "n1", Updates: []*pb.AllocClientUpdate{
		{AllocId: "a", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING},
		{AllocId: "b", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING},
	}})
	countAllocUpdates(c, &pb.ClientAllocUpdateRequest{NodeId: "n2", Updates: []*pb.AllocClientUpdate{
		{AllocId: "c", ClientStatus: pb.AllocClientStatus_ALLOC_CLIENT_STATUS_RUNNING},
	}})
	countAllocUpdates(c, &pb.NodeHeartbeatRequest{NodeId: "n1"})
	after := c.snapshot()
	total, by := allocUpdates(before, after)
	if want := map[string]int64{"PENDING": 1, "RUNNING": 2}; total != 3 || !maps.Equal(by, want) {
		t.Fatalf("counted %d, %v; want 3, %v", total, by, want)
	}
	if got := fmtCounts(by); got != "(PENDING 1, RUNNING 2)" {
		t.Fatalf("printed %q", got)
	}
	if r := rates(before, after, 1); len(r) != 0 {
		t.Fatalf("alloc updates counted as calls: %v", r)
	}
}
