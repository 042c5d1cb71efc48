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

// core.Barrier promises the state holds every committed entry: it waits
// for a snapshot raft installed that is still decoding (raft's barrier
// does not). The restore is handed to the FSM directly, as raft hands it
// a leader's InstallSnapshot, and its decoding held.
func TestCoreBarrierWaitsForADeferredDecode(t *testing.T) {
	release := make(chan struct{})
	decoding := make(chan struct{})
	var armed bool
	tc := newTestCluster(t, 1, func(c *testConfig) {
		c.hooks = &testHooks{beforeDeferredDecode: func() {
			if armed {
				close(decoding)
				<-release
			}
		}}
	})
	s := tc.waitLeader()
	snap, err := s.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		sink := &pipeSink{PipeWriter: pw}
		if err := snap.Persist(sink); err != nil {
			pw.CloseWithError(err)
		}
	}()
	armed = true
	if err := s.fsm.Restore(pr); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	snap.Release()
	<-decoding
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := (core{s}).Barrier(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Barrier while a restore decodes = %v, want it to wait until its context ends", err)
	}
	close(release)
	if err := (core{s}).Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier after the decoding: %v", err)
	}
	if !s.fsm.WaitRestored(context.Background()) {
		t.Fatal("WaitRestored = false")
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
