package client

import (
	"context"
	"sort"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/rpc/pb"
)

// updater sends alloc status updates to the servers in batches: at once
// when no batch is in flight, and while one is, the latest update of each
// alloc waits for it (older ones are dropped). A batch that fails is sent
// again, after a capped backoff, with whatever newer updates came
// meanwhile; a batch the servers refuse is dropped (retrying cannot help).
// There is no batching interval: the batch is whatever accumulated while
// the previous one was in flight.
//
// One exception: an update that reports an alloc pending (an alloc
// starting: the servers hold it pending already) waits up to hold for a
// later one, so allocs that start together report pending and running as
// one batch, and running is not queued behind a pending in flight. Any
// other status (running, or an end) sends what is waiting at once.
type updater struct {
	send   func(ctx context.Context, batch []*pb.AllocClientUpdate) error
	logger hclog.Logger
	ctx    context.Context
	// refused reports errors not worth retrying.
	refused func(error) bool
	// sleep waits out a backoff (tests replace it).
	sleep func(ctx context.Context, d time.Duration)

	// hold is how long pending-status updates may wait (0: not at all);
	// afterFunc arms that wait (tests replace it).
	hold      time.Duration
	afterFunc func(d time.Duration, f func()) clock.Timer

	mu       sync.Mutex
	pending  map[string]*pb.AllocClientUpdate
	inflight bool
	// held is the armed wait of pending-status updates, nil when none;
	// heldGen counts the waits armed, so a wait that ran out after it was
	// replaced (its Stop came too late) knows it is no longer current.
	held    clock.Timer
	heldGen uint64
}

// pendingHold is how long an update reporting an alloc pending waits for
// a later status before it is sent.
const pendingHold = 50 * time.Millisecond

func newUpdater(ctx context.Context, logger hclog.Logger, send func(context.Context, []*pb.AllocClientUpdate) error, refused func(error) bool) *updater {
	return &updater{send: send, logger: logger, ctx: ctx, refused: refused,
		sleep:     func(ctx context.Context, d time.Duration) { backoff.Sleep(ctx.Done(), d) },
		afterFunc: clock.Real{}.AfterFunc,
		pending:   map[string]*pb.AllocClientUpdate{}}
}

// add queues an alloc's latest status.
func (u *updater) add(up *pb.AllocClientUpdate) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pending[up.GetAllocId()] = up
	if u.inflight {
		return
	}
	// Nothing in flight: everything waiting reports pending (anything
	// else would have started a send), so a pending one may wait too.
	if u.hold > 0 && up.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING {
		if u.held == nil {
			u.heldGen++
			gen := u.heldGen
			u.held = u.afterFunc(u.hold, func() { u.release(gen) })
		}
		return
	}
	u.startFlush()
}

// release sends the pending-status updates whose wait, number gen, ran
// out. A wait already ended by a send (startFlush stopped it too late)
// does nothing: the updates it held went with that send, and a newer wait
// armed since is left to run its full hold.
func (u *updater) release(gen uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held == nil || gen != u.heldGen {
		return
	}
	u.held = nil
	if !u.inflight && len(u.pending) > 0 {
		u.startFlush()
	}
}

// startFlush starts sending; u.mu is held.
func (u *updater) startFlush() {
	if u.held != nil {
		u.held.Stop()
		u.held = nil
	}
	u.inflight = true
	go u.flush()
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
