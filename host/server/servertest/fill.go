package servertest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// SyntheticNodes returns count nodes with IDs that sort in no particular
// relation to their index, named synthetic-N; every third is down. edit,
// when not nil, is applied to each before it is returned.
func SyntheticNodes(count int, edit func(*pb.Node)) []*pb.Node {
	nodes := make([]*pb.Node, count)
	for i := range count {
		n := &pb.Node{Id: fmt.Sprintf("%08x-0000-4000-8000-%012x", i*7919, i), Name: fmt.Sprintf("synthetic-%d", i),
			Status: pb.NodeStatus_NODE_STATUS_READY}
		if i%3 == 0 {
			n.Status = pb.NodeStatus_NODE_STATUS_DOWN
		}
		if edit != nil {
			edit(n)
		}
		nodes[i] = n
	}
	return nodes
}

// RegisterNodes applies a NodeRegister command for each node straight to r
// (the leader's raft), bypassing the Register endpoint, so no heartbeat timer
// is armed and no node changes status during the test. The commands come
// from many goroutines at once: raft's leader loop batches the applies that
// wait when it takes one, where one sender would commit (and fsync) one
// entry at a time.
func RegisterNodes(t testing.TB, r *raft.Raft, nodes []*pb.Node) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	senders := make(chan struct{}, 128)
	for _, n := range nodes {
		buf, err := fsm.Encode(fsm.NodeRegister, &pb.NodeRegisterCommand{Node: n})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		senders <- struct{}{}
		go func() {
			defer func() { <-senders; wg.Done() }()
			if err := r.Apply(buf, time.Minute).Error(); err != nil {
				errs <- fmt.Errorf("registering node %s: %w", n.GetId(), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
