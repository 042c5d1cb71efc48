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
// later one of the same alloc, which replaces it, so an alloc that starts
// within the hold reports running alone and the servers write its row
// once, not twice (on every server). Other updates do not take the held
// ones along: a node starting two allocs sends the first's running while
// the second's pending waits for its own running. Any other status
// (running, or an end) is sent at once, or with the next batch when one
// is in flight; a pending update whose hold ran out goes likewise.
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
// a later status of its alloc before it is sent: Nomad's client batches
// every alloc update for as long (allocSyncIntv). The servers hold the
// alloc pending already, so only its task events (received, setting up)
// wait; a running or an end is never held. At 900 simulated nodes and
// 5,000 allocs, 50 ms (the hold sending pending updates along with any
// other update) let 2,807 pending updates through, 200 ms held alone 585.
const pendingHold = 200 * time.Millisecond

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
	if u.hold > 0 && reportsPending(up) {
		if u.held == nil {
			u.heldGen++
			gen := u.heldGen
			u.held = u.afterFunc(u.hold, func() { u.release(gen) })
		}
		return
	}
	if u.inflight {
		return
	}
	u.startFlush()
}

// reportsPending reports whether up reports its alloc pending: the
// updates a hold keeps back.
func reportsPending(up *pb.AllocClientUpdate) bool {
	return up.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
}

// takeBatch removes from pending and returns what is to be sent now:
// everything but the pending-status updates an armed hold keeps back.
// When none is kept back the hold has nothing left to wait for and is
// stopped. u.mu is held.
func (u *updater) takeBatch() []*pb.AllocClientUpdate {
	batch := make([]*pb.AllocClientUpdate, 0, len(u.pending))
	kept := false
	for id, up := range u.pending {
		if u.held != nil && reportsPending(up) {
			kept = true
			continue
		}
		batch = append(batch, up)
		delete(u.pending, id)
	}
	if !kept && u.held != nil {
		u.held.Stop()
		u.held = nil
	}
	return batch
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
	u.inflight = true
	go u.flush()
}

// flush sends batches until nothing is pending.
func (u *updater) flush() {
	failures := 0 // consecutive batches that failed
	for {
		u.mu.Lock()
		var batch []*pb.AllocClientUpdate
		if u.ctx.Err() == nil {
			batch = u.takeBatch()
		}
		if len(batch) == 0 {
			u.inflight = false
			u.mu.Unlock()
			return
		}
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
