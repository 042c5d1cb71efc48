package client

import (
	"context"
	"sort"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/pb"
)

// updater sends alloc status updates to the servers in batches: at once
// when no batch is in flight, and while one is, the latest update of each
// alloc waits for it (older ones are dropped). A batch that fails is sent
// again, after a capped backoff, with whatever newer updates came
// meanwhile; a batch the servers refuse is dropped (retrying cannot help).
// There is no batching interval: the batch is whatever accumulated while
// the previous one was in flight.
type updater struct {
	send   func(ctx context.Context, batch []*pb.AllocClientUpdate) error
	logger hclog.Logger
	ctx    context.Context
	// refused reports errors not worth retrying.
	refused func(error) bool
	// sleep waits out a backoff (tests replace it).
	sleep func(ctx context.Context, d time.Duration)

	mu       sync.Mutex
	pending  map[string]*pb.AllocClientUpdate
	inflight bool
}

func newUpdater(ctx context.Context, logger hclog.Logger, send func(context.Context, []*pb.AllocClientUpdate) error, refused func(error) bool) *updater {
	return &updater{send: send, logger: logger, ctx: ctx, refused: refused,
		sleep:   func(ctx context.Context, d time.Duration) { backoff.Sleep(ctx.Done(), d) },
		pending: map[string]*pb.AllocClientUpdate{}}
}

// add queues an alloc's latest status.
func (u *updater) add(up *pb.AllocClientUpdate) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pending[up.GetAllocId()] = up
	if !u.inflight {
		u.inflight = true
		go u.flush()
	}
}

// flush sends batches until nothing is pending.
func (u *updater) flush() {
	failures := 0 // consecutive batches that failed
	for {
		u.mu.Lock()
		if len(u.pending) == 0 || u.ctx.Err() != nil {
			u.inflight = false
			u.mu.Unlock()
			return
		}
		batch := make([]*pb.AllocClientUpdate, 0, len(u.pending))
		for _, up := range u.pending {
			batch = append(batch, up)
		}
		clear(u.pending)
		u.mu.Unlock()
		sort.Slice(batch, func(i, j int) bool { return batch[i].GetAllocId() < batch[j].GetAllocId() })

		err := u.send(u.ctx, batch)
		switch {
		case err == nil:
			failures = 0
			continue
		case u.refused(err):
			u.logger.Error("servers refused alloc status updates; dropping them", "allocs", len(batch), "error", err)
			continue
		}
		failures++
		wait := serverRetry.Delay(failures)
		u.logger.Warn("sending alloc status updates", "allocs", len(batch), "error", err, "retry_in", wait)
		u.mu.Lock()
		for _, up := range batch {
			if _, newer := u.pending[up.GetAllocId()]; !newer {
				u.pending[up.GetAllocId()] = up
			}
		}
		u.mu.Unlock()
		u.sleep(u.ctx, wait)
	}
}
