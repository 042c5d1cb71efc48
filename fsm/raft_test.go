package fsm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// newSingleRaft runs a one-server raft cluster over raft's in-memory
// transport with f as its state machine, and waits until it leads.
func newSingleRaft(t *testing.T, f *fsm.FSM) *raft.Raft {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = "s1"
	conf.Logger = testLogger(t)
	// Short timeouts make the lone server elect itself quickly; the wait
	// below is generous so a slow machine only makes the test slower.
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	store := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	addr, trans := raft.NewInmemTransport("")
	err := raft.BootstrapCluster(conf, store, store, snaps, trans, raft.Configuration{
		Servers: []raft.Server{{ID: conf.LocalID, Address: addr}},
	})
	if err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	r, err := raft.NewRaft(conf, f, store, store, snaps, trans)
	if err != nil {
		t.Fatalf("NewRaft: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("raft shutdown: %v", err)
		}
	})
	deadline := time.After(time.Minute)
	for r.State() != raft.Leader {
		select {
		case <-deadline:
			t.Fatal("single server did not become leader within a minute")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return r
}

// TestThroughRaft drives the FSM through a real raft: typed results via
// ResultOf, command errors surfacing to the proposer, and a raft snapshot
// restored through Restore.
func TestThroughRaft(t *testing.T) {
	f := fsm.New(testLogger(t))
	r := newSingleRaft(t, f)
	ctx := t.Context()
	const timeout = 30 * time.Second

	index, err := fsm.ResultOf(ctx, r.Apply(mustEncode(t, fsm.NodeRegister, registerCmd("n1", "a", pb.NodeStatus_NODE_STATUS_READY)), timeout))
	if err != nil || index == 0 {
		t.Fatalf("ResultOf(NodeRegister) = %d, %v", index, err)
	}
	n, err := f.State().NodeByID(nil, "n1")
	if err != nil || n.GetCreateIndex() != index || n.GetModifyIndex() != index {
		t.Fatalf("node after register = %v, %v; want create and modify index %d", n, err, index)
	}

	bad, err := fsm.ResultOf(ctx, r.Apply(mustEncode(t, fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
		NodeId: "ghost", Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: 1,
	}), timeout))
	if !errors.Is(err, fsm.ErrNodeNotFound) || bad <= index {
		t.Fatalf("ResultOf(update unknown node) = %d, %v; want ErrNodeNotFound at an index after %d", bad, err, index)
	}

	// Snapshot through raft, change the state, restore the snapshot.
	snapFuture := r.Snapshot()
	if err := snapFuture.Error(); err != nil {
		t.Fatalf("raft snapshot: %v", err)
	}
	if _, err := fsm.ResultOf(ctx, r.Apply(mustEncode(t, fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: "n1"}), timeout)); err != nil {
		t.Fatalf("deregister: %v", err)
	}
	if n, _ := f.State().NodeByID(nil, "n1"); n != nil {
		t.Fatalf("n1 still registered after deregister")
	}
	meta, rc, err := snapFuture.Open()
	if err != nil {
		t.Fatalf("open snapshot: %v", err)
	}
	old := f.State()
	if err := r.Restore(meta, rc, timeout); err != nil {
		t.Fatalf("raft restore: %v", err)
	}
	if n, _ := f.State().NodeByID(nil, "n1"); n == nil || n.GetCreateIndex() != index {
		t.Fatalf("after restore n1 = %v, want it back with create index %d", n, index)
	}
	select {
	case <-old.AbandonCh():
	default:
		t.Fatal("restore through raft did not abandon the old store")
	}

	// An unknown, non-ignorable command fails at the proposer too.
	if _, err := fsm.ResultOf(ctx, r.Apply([]byte{0x7e}, timeout)); !errors.Is(err, fsm.ErrUnknownCommand) {
		t.Fatalf("ResultOf(unknown command) = %v, want ErrUnknownCommand", err)
	}
}

// fakeFuture is a raft.ApplyFuture with a canned outcome; Error blocks until
// release is closed, if set.
type fakeFuture struct {
	err     error
	resp    any
	release chan struct{}
}

var _ raft.ApplyFuture = (*fakeFuture)(nil)

func (f *fakeFuture) Error() error {
	if f.release != nil {
		<-f.release
	}
	return f.err
}
func (f *fakeFuture) Response() any { return f.resp }
func (f *fakeFuture) Index() uint64 { return 0 }

func TestResultOf(t *testing.T) {
	ctx := t.Context()
	if _, err := fsm.ResultOf(ctx, &fakeFuture{err: raft.ErrNotLeader}); !errors.Is(err, raft.ErrNotLeader) {
		t.Errorf("raft error: got %v, want ErrNotLeader", err)
	}
	if _, err := fsm.ResultOf(ctx, &fakeFuture{resp: "surprise"}); !errors.Is(err, fsm.ErrUnexpectedResponse) {
		t.Errorf("foreign response: got %v, want ErrUnexpectedResponse", err)
	}
	if _, err := fsm.ResultOf(ctx, &fakeFuture{resp: (*fsm.ApplyResult)(nil)}); !errors.Is(err, fsm.ErrUnexpectedResponse) {
		t.Errorf("nil result: got %v, want ErrUnexpectedResponse", err)
	}
	index, err := fsm.ResultOf(ctx, &fakeFuture{resp: &fsm.ApplyResult{Index: 12, Type: fsm.NodeRegister}})
	if err != nil || index != 12 {
		t.Errorf("success: got %d, %v; want 12, nil", index, err)
	}

	release := make(chan struct{})
	defer close(release)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := fsm.ResultOf(cctx, &fakeFuture{release: release}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: got %v, want context.Canceled", err)
	}
}
