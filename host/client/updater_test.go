package client

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

// fakeSend records batches; each call blocks until released.
type fakeSend struct {
	mu      sync.Mutex
	batches [][]string
	release chan error
}

func (f *fakeSend) send(_ context.Context, batch []*pb.AllocClientUpdate) error {
	var ids []string
	for _, u := range batch {
		ids = append(ids, u.GetAllocId()+"@"+u.GetClientDescription())
	}
	f.mu.Lock()
	f.batches = append(f.batches, ids)
	f.mu.Unlock()
	return <-f.release
}

func (f *fakeSend) sent() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

func up(id, version string) *pb.AllocClientUpdate {
	return &pb.AllocClientUpdate{AllocId: id, ClientDescription: version}
}

func waitBatches(t *testing.T, f *fakeSend, n int) [][]string {
	t.Helper()
	var got [][]string
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got = f.sent(); len(got) < n {
			return errors.New("too few batches")
		}
		return nil
	})
	return got
}

// The first update goes at once; those that come while it is in flight
// are coalesced (latest per alloc) into the next batch.
func TestUpdaterSendsAtOnceAndCoalescesWhileInFlight(t *testing.T) {
	f := &fakeSend{release: make(chan error)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := newUpdater(ctx, testutil.Logger(t), f.send, func(error) bool { return false })
	u.add(up("a", "1"))
	waitBatches(t, f, 1)
	u.add(up("a", "2"))
	u.add(up("b", "1"))
	u.add(up("a", "3"))
	f.release <- nil
	got := waitBatches(t, f, 2)
	f.release <- nil
	want := [][]string{{"a@1"}, {"a@3", "b@1"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// A failed batch is sent again after a backoff, merged under newer
// updates; a refused one is dropped.
func TestUpdaterRetriesFailedBatches(t *testing.T) {
	f := &fakeSend{release: make(chan error)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	refused := func(err error) bool { return status.Code(err) == codes.InvalidArgument }
	u := newUpdater(ctx, testutil.Logger(t), f.send, refused)
	slept := make(chan time.Duration)
	wake := make(chan struct{})
	u.sleep = func(_ context.Context, d time.Duration) {
		slept <- d
		<-wake
	}
	u.add(up("a", "1"))
	waitBatches(t, f, 1)
	u.add(up("b", "1"))
	f.release <- status.Error(codes.Unavailable, "no leader")
	if d := <-slept; d != minRetry {
		t.Fatalf("first backoff %s, want %s", d, minRetry)
	}
	u.add(up("a", "2"))
	wake <- struct{}{}
	waitBatches(t, f, 2)
	f.release <- status.Error(codes.Unavailable, "still no leader")
	if d := <-slept; d != 2*minRetry {
		t.Fatalf("second backoff %s, want %s", d, 2*minRetry)
	}
	wake <- struct{}{}
	waitBatches(t, f, 3)
	f.release <- status.Error(codes.InvalidArgument, "bad")
	testutil.WaitFor(t, 10*time.Second, func() error {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.inflight {
			return errors.New("still in flight")
		}
		return nil
	})
	u.add(up("c", "1"))
	waitBatches(t, f, 4)
	f.release <- nil
	want := [][]string{{"a@1"}, {"a@2", "b@1"}, {"a@2", "b@1"}, {"c@1"}}
	if got := f.sent(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}
