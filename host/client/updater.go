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
// starting, or a task restarting) waits until hold (startHold for an
// alloc not yet started, busyStartHold while the servers are busy) has
// passed since the alloc's first pending update that is still waiting,
// for a later status to replace it. It rides with no other send before
// then, in flight or not (one that comes due during a failed batch's
// backoff goes with the retry: nothing is sent meanwhile): the servers
// hold a starting alloc pending already, and a pending row sent beside
// another alloc's running update was replaced by its own running a
// moment later, one raft entry applied on every server for nothing (at
// 5,000 simulated nodes, 9,506 of the 19,506 alloc rows of a 10,000-alloc
// job). Any other status goes as before; it replaces the
// alloc's waiting pending update. Once ctx ends, nothing held is sent.
type updater struct {
	send   func(ctx context.Context, batch []*pb.AllocClientUpdate) error
	logger hclog.Logger
	ctx    context.Context
	// refused reports errors not worth retrying.
	refused func(error) bool
	// sleep waits out a backoff (tests replace it).
	sleep func(ctx context.Context, d time.Duration)

	// hold is how long pending-status updates may wait (0: not at all),
	// startHold how long those of an alloc not yet started may (0: hold),
	// busyStartHold how long they may while busy (0: startHold);
	// afterFunc arms that wait and now reads the time (tests replace
	// them).
	hold, startHold, busyStartHold time.Duration
	afterFunc                      func(d time.Duration, f func()) clock.Timer
	now                            func() time.Time

	mu       sync.Mutex
	pending  map[string]*pb.AllocClientUpdate
	inflight bool
	// heldUntil holds, for each alloc whose waiting update reports it
	// pending, when that update is due.
	heldUntil map[string]time.Time
	// held is the armed wait for the earliest of heldUntil (heldAt), nil
	// when none; heldGen counts the waits armed, so a wait that ran out
	// after it was replaced (its Stop came too late) knows it is no
	// longer current.
	held    clock.Timer
	heldAt  time.Time
	heldGen uint64
	// busy reports the servers busy as this client last saw them: its
	// latest send failed or took longer than startHold.
	busy bool
}

// pendingHold is how long an update reporting an alloc pending waits for
// a later status before it is sent: a task restarting.
const pendingHold = 50 * time.Millisecond

// startingHold is pendingHold for an alloc none of whose tasks has started
// yet. Its pending update tells the servers only task events (they hold
// the alloc pending since they placed it), so it may wait out a quick
// start; but an alloc stuck starting (an image pull, an artifact, a CSI
// volume not yet attached) is when a user runs alloc status to see why,
// so its events reach the servers at most this late (Nomad's client
// batches every 200 ms).
const startingHold = time.Second

// busyStartingHold is startingHold while the servers are busy as this
// client sees them: its latest alloc-update send failed (it is retried)
// or took longer than startingHold. The send's own time is the signal: it
// is what a pending row costs the servers (one raft entry applied on
// each) and it needs no other call; a slow or failing send is the
// servers' raft or RPC queue backing up, when a row saved counts most. At
// 5,000 simulated nodes, 46% of the starts took longer than a second
// (2-6 s), 6% longer than this; each that outlasted the hold sent a
// pending row of its own.
const busyStartingHold = 5 * time.Second

// starting reports whether up is of an alloc none of whose tasks has
// started or restarted yet.
func starting(up *pb.AllocClientUpdate) bool {
	for _, ts := range up.GetTaskStates() {
		if ts.GetStartedAt() != 0 || ts.GetRestarts() != 0 || ts.GetFinishedAt() != 0 {
			return false
		}
	}
	return true
}

func newUpdater(ctx context.Context, logger hclog.Logger, send func(context.Context, []*pb.AllocClientUpdate) error, refused func(error) bool) *updater {
	u := &updater{send: send, logger: logger, ctx: ctx, refused: refused,
		sleep:     func(ctx context.Context, d time.Duration) { backoff.Sleep(ctx.Done(), d) },
		afterFunc: clock.Real{}.AfterFunc,
		now:       time.Now,
		pending:   map[string]*pb.AllocClientUpdate{},
		heldUntil: map[string]time.Time{}}
	// Once the client stops, nothing held is sent: the armed wait ends.
	context.AfterFunc(ctx, u.stopHeld)
	return u
}

// stopHeld ends the armed wait for held updates.
func (u *updater) stopHeld() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held != nil {
		u.held.Stop()
		u.held = nil
	}
}

// add queues an alloc's latest status.
func (u *updater) add(up *pb.AllocClientUpdate) {
	u.mu.Lock()
	defer u.mu.Unlock()
	id := up.GetAllocId()
	u.pending[id] = up
	if hold := u.holdFor(up); hold > 0 && up.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING {
		// A shorter hold (a task of the alloc started) brings the wait
		// forward; a longer one never pushes it back.
		due := u.now().Add(hold)
		if until, waiting := u.heldUntil[id]; !waiting || due.Before(until) {
			u.heldUntil[id] = due
		}
	} else {
		delete(u.heldUntil, id)
	}
	if u.inflight {
		// The send loop takes what is due when the batch in flight ends,
		// and arms the wait for the rest.
		return
	}
	u.sendOrWait()
}

// holdFor is how long up may wait if it reports its alloc pending; u.mu is
// held. The busy signal is read when an alloc's pending update first
// waits: the servers turning quiet does not shorten a wait already armed
// (the alloc's next pending update, a task event, does).
func (u *updater) holdFor(up *pb.AllocClientUpdate) time.Duration {
	switch {
	case u.startHold <= 0 || !starting(up):
		return u.hold
	case u.busy && u.busyStartHold > u.startHold:
		return u.busyStartHold
	}
	return u.startHold
}

// sendOrWait starts sending when an update is due, else arms the wait for
// the earliest held one; u.mu is held and nothing is in flight.
func (u *updater) sendOrWait() {
	now := u.now()
	for id := range u.pending {
		if u.due(id, now) {
			u.startFlush()
			return
		}
	}
	u.arm(now)
}

// due reports whether alloc id's waiting update may be sent at now; u.mu
// is held.
func (u *updater) due(id string, now time.Time) bool {
	until, held := u.heldUntil[id]
	return !held || !now.Before(until)
}

// arm sets the wait to the earliest held update's time, or ends it when
// none is held; u.mu is held.
func (u *updater) arm(now time.Time) {
	var earliest time.Time
	for _, until := range u.heldUntil {
		if earliest.IsZero() || until.Before(earliest) {
			earliest = until
		}
	}
	if u.held != nil && (earliest.IsZero() || !u.heldAt.Equal(earliest)) {
		u.held.Stop()
		u.held = nil
	}
	if earliest.IsZero() || u.held != nil {
		return
	}
	u.heldGen++
	gen := u.heldGen
	u.heldAt = earliest
	u.held = u.afterFunc(earliest.Sub(now), func() { u.release(gen) })
}

// release sends the held updates that are due once wait number gen ran
// out. A wait replaced since (its Stop came too late) does nothing: the
// newer one is armed for what is still held.
func (u *updater) release(gen uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.held == nil || gen != u.heldGen || u.ctx.Err() != nil {
		return
	}
	u.held = nil
	if !u.inflight {
		u.sendOrWait()
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
		if u.ctx.Err() != nil {
			u.inflight = false
			u.mu.Unlock()
			return
		}
		now := u.now()
		batch := make([]*pb.AllocClientUpdate, 0, len(u.pending))
		for id, up := range u.pending {
			if u.due(id, now) {
				batch = append(batch, up)
				delete(u.pending, id)
				delete(u.heldUntil, id)
			}
		}
		if len(batch) == 0 {
			u.inflight = false
			u.arm(now)
			u.mu.Unlock()
			return
		}
		u.mu.Unlock()
		sort.Slice(batch, func(i, j int) bool { return batch[i].GetAllocId() < batch[j].GetAllocId() })

		began := u.now()
		err := u.send(u.ctx, batch)
		failed := err != nil && !u.refused(err)
		u.mu.Lock()
		u.busy = failed || u.now().Sub(began) > u.startHold
		if failed {
			for _, up := range batch {
				if _, newer := u.pending[up.GetAllocId()]; !newer {
					u.pending[up.GetAllocId()] = up
				}
			}
		}
		u.mu.Unlock()
		switch {
		case err == nil:
			failures = 0
			continue
		case !failed:
			u.logger.Error("servers refused alloc status updates; dropping them", "allocs", len(batch), "error", err)
			continue
		}
		failures++
		wait := serverRetry.Delay(failures)
		u.logger.Warn("sending alloc status updates", "allocs", len(batch), "error", err, "retry_in", wait)
		u.sleep(u.ctx, wait)
	}
}
