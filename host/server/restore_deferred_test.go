package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/pb"
)

// heldDeferredRestore starts a single-server cluster and hands its FSM a
// restore of its own state directly, as raft hands it a leader's
// InstallSnapshot, its decoding held until the returned release is
// called.
func heldDeferredRestore(t *testing.T) (s *Server, release func()) {
	t.Helper()
	held := make(chan struct{})
	decoding := make(chan struct{})
	var armed bool
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.hooks = &testHooks{beforeDeferredDecode: func() {
			if armed {
				close(decoding)
				<-held
			}
		}}
	})
	s = tc.waitLeader()
	snap, err := s.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	pr, pw := io.Pipe()
	go func() {
		if err := snap.Persist(pipeSink{pw}); err != nil {
			pw.CloseWithError(err)
		}
	}()
	armed = true
	if err := s.fsm.Restore(pr); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	<-decoding
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	return s, release
}

// core.Barrier promises the state holds every committed entry: it waits
// for a snapshot raft installed that is still decoding (raft's barrier
// does not).
func TestCoreBarrierWaitsForADeferredDecode(t *testing.T) {
	s, release := heldDeferredRestore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := (core{s}).Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Barrier while a restore decodes = %v, want it to wait until its context ends", err)
	}
	release()
	if err := (core{s}).Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier after the decoding: %v", err)
	}
	if !s.fsm.WaitRestored(context.Background()) {
		t.Fatal("WaitRestored = false")
	}
}

// A new leader's barrier (before its duties start) waits for a snapshot
// raft installed while it was a follower that is still decoding.
func TestLeaderBarrierWaitsForADeferredDecode(t *testing.T) {
	s, release := heldDeferredRestore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if s.barrier(ctx) {
		t.Fatal("the leader's barrier passed while a restore was decoding")
	}
	release()
	if !s.barrier(context.Background()) {
		t.Fatal("the leader's barrier failed after the decoding")
	}
}

// pipeSink is a raft.SnapshotSink writing into a pipe.
type pipeSink struct{ *io.PipeWriter }

func (pipeSink) ID() string      { return "test" }
func (p pipeSink) Cancel() error { return p.CloseWithError(errors.New("cancelled")) }

// A server that has just become leader authorizes a call only once its
// barrier is through (and with it a snapshot raft installed while it was
// a follower is decoded: barrier waits for it), not on the state it had
// as a follower, where a token since deleted may still be.
func TestNewLeaderAuthorizesOnlyAfterItsBarrier(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	tc := newTestCluster(t, 1, withACL, func(c *testConfig) {
		c.hooks = &testHooks{beforeBarrier: func(ctx context.Context) {
			once.Do(func() {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
			})
		}}
	})
	<-entered
	s := tc.live()[0]
	if !s.IsLeader() {
		t.Fatal("the barrier hook ran on a server that is not leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := s.authorize(ctx, pb.Nodes_List_FullMethodName, nil)
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("authorize before the new leader's barrier = %v, want it to wait for the barrier", err)
	}
	close(release)
	if err := s.awaitLeaderReady(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
}
