package evals

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrBrokerDisabled is returned by the broker's Dequeue when this server
// stopped leading: its evaluations are now another leader's to hand out.
var ErrBrokerDisabled = errcode.New(codes.Unavailable, "evaluation broker disabled (not the leader)")

// ErrEvalToken is returned by Ack and Nack for an evaluation that is not
// outstanding under that token: it was nacked by its deadline, or the
// broker was reset by a leadership change.
var ErrEvalToken = errcode.New(codes.FailedPrecondition, "evaluation is not outstanding under this token")

// brokerConfig tunes the evaluation broker.
type brokerConfig struct {
	// deliveryLimit is how many times an evaluation is handed out before a
	// nack fails it for good.
	deliveryLimit int
	// nackDelay is the wait before a nacked evaluation is handed out again,
	// doubled per nack up to maxNackDelay.
	nackDelay    time.Duration
	maxNackDelay time.Duration
}

func (c brokerConfig) withDefaults() brokerConfig {
	if c.deliveryLimit <= 0 {
		c.deliveryLimit = 3
	}
	if c.nackDelay <= 0 {
		c.nackDelay = time.Second
	}
	if c.maxNackDelay <= 0 {
		c.maxNackDelay = 20 * time.Second
	}
	return c
}

// Broker hands pending evaluations to scheduler workers on the leader:
// highest priority first, then oldest; at most one evaluation per job
// outstanding at a time (a job's later evaluations wait for the first to be
// acked, so two workers never plan one job from two snapshots); delayed
// evaluations (wait_until) only once their time comes; nacked ones again
// after a backoff. It holds no state of its own that matters: a new leader
// rebuilds it from the pending evaluations in the replicated state.
type Broker struct {
	cfg   brokerConfig
	clock clock.Clock

	mu      sync.Mutex
	enabled bool
	// ready are evaluations a worker may take now.
	ready evalHeap
	// waiting holds a job's further evaluations while one is outstanding.
	waiting map[string][]*pb.Evaluation
	// inFlight maps a job to its outstanding evaluation's ID.
	inFlight map[string]string
	unacked  map[string]*unacked
	// held is every evaluation the broker holds in any form, by ID, so the
	// state watcher's repeated sightings enqueue it once.
	held map[string]bool
	// done records, per acked evaluation, the index of the write that
	// finished it: a sighting from an older snapshot is not new work, while
	// the same evaluation made pending again (unblocked) is.
	done    map[string]uint64
	delayed map[string]clock.Timer
	// again holds an evaluation seen pending again (a newer modify index)
	// while the broker still held it: it is handed out once the held one
	// is acked.
	again map[string]*pb.Evaluation
	// wakeAgain holds a blocked evaluation woken (wake) while a worker
	// held it, with the index of the change that woke it: handed out again
	// at its ack if the worker planned from a state before that change.
	wakeAgain map[string]woken
	// nacks counts deliveries per evaluation ID.
	nacks map[string]int
	// changed is closed and replaced whenever ready gains an evaluation or
	// the broker is disabled.
	changed chan struct{}
	// readySince is when each evaluation last became ready (or parked
	// behind its job), for the latency to its ack or nack (metrics.go).
	readySince map[string]time.Time
}

type unacked struct {
	eval  *pb.Evaluation
	token string
}

func newBroker(clk clock.Clock, cfg brokerConfig) *Broker {
	b := &Broker{cfg: cfg.withDefaults(), clock: clk, changed: make(chan struct{})}
	b.resetLocked()
	return b
}

func (b *Broker) resetLocked() {
	for _, t := range b.delayed {
		t.Stop()
	}
	b.ready = nil
	b.waiting = map[string][]*pb.Evaluation{}
	b.inFlight = map[string]string{}
	b.unacked = map[string]*unacked{}
	b.held = map[string]bool{}
	b.done = map[string]uint64{}
	b.delayed = map[string]clock.Timer{}
	b.again = map[string]*pb.Evaluation{}
	b.wakeAgain = map[string]woken{}
	b.nacks = map[string]int{}
	b.readySince = map[string]time.Time{}
}

// SetEnabled turns the broker on when this server's leadership is ready and
// off when it ends; turning it off drops everything and wakes every waiting
// worker with ErrBrokerDisabled.
func (b *Broker) SetEnabled(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.enabled = on
	if !on {
		b.resetLocked()
	}
	b.notifyLocked()
}

func (b *Broker) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// enqueue adds a pending evaluation. Evaluations already held, or finished
// by a write at or after the index the caller read, are ignored; so is
// everything while the broker is disabled.
func (b *Broker) enqueue(e *pb.Evaluation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.enabled {
		return
	}
	if b.held[e.GetId()] {
		if u := b.unacked[e.GetId()]; u != nil && e.GetModifyIndex() > u.eval.GetModifyIndex() {
			b.again[e.GetId()] = e
		}
		return
	}
	if idx, ok := b.done[e.GetId()]; ok && e.GetModifyIndex() <= idx {
		return
	}
	delete(b.done, e.GetId())
	b.held[e.GetId()] = true
	if wait := time.Duration(e.GetWaitUntil() - b.clock.Now().UnixNano()); e.GetWaitUntil() > 0 && wait > 0 {
		id := e.GetId()
		b.delayed[id] = b.clock.AfterFunc(wait, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if _, ok := b.delayed[id]; !ok {
				return
			}
			delete(b.delayed, id)
			b.readyLocked(e)
		})
		return
	}
	b.readyLocked(e)
}

// readyLocked makes e available, or parks it behind its job's outstanding
// evaluation.
func (b *Broker) readyLocked(e *pb.Evaluation) {
	b.markReadyLocked(e.GetId())
	if _, busy := b.inFlight[e.GetJobId()]; busy {
		b.waiting[e.GetJobId()] = append(b.waiting[e.GetJobId()], e)
		return
	}
	for _, r := range b.ready {
		if r.GetJobId() == e.GetJobId() {
			b.waiting[e.GetJobId()] = append(b.waiting[e.GetJobId()], e)
			return
		}
	}
	heap.Push(&b.ready, e)
	b.notifyLocked()
}

// dequeue waits for an evaluation and returns it with the token its ack or
// nack must carry. It returns ErrBrokerDisabled when the broker is off and
// ctx's error when ctx ends, checked before an evaluation is taken: a
// worker of an ended leadership, whose server leads again, must not take
// one from the new leadership's broker (it would exit without an ack, and
// the evaluation and its job would stay outstanding).
func (b *Broker) dequeue(ctx context.Context) (*pb.Evaluation, string, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		b.mu.Lock()
		if !b.enabled {
			b.mu.Unlock()
			return nil, "", ErrBrokerDisabled
		}
		if b.ready.Len() > 0 {
			e := heap.Pop(&b.ready).(*pb.Evaluation)
			token := uuid.Generate()
			b.unacked[e.GetId()] = &unacked{eval: e, token: token}
			b.inFlight[e.GetJobId()] = e.GetId()
			b.nacks[e.GetId()]++
			b.mu.Unlock()
			return e, token, nil
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
}

// outstanding checks token against an outstanding evaluation.
func (b *Broker) outstandingLocked(evalID, token string) (*unacked, error) {
	u, ok := b.unacked[evalID]
	if !ok || u.token != token {
		return nil, fmt.Errorf("evaluation %s: %w", evalID, ErrEvalToken)
	}
	return u, nil
}

// ack records that evalID was handled, its outcome written to the state at
// index doneIndex; the job's next evaluation becomes available.
func (b *Broker) ack(evalID, token string, doneIndex uint64) error {
	return b.ackPlanned(evalID, token, doneIndex, doneIndex)
}

// ackPlanned is ack for a worker that planned the evaluation from a state
// at index planned: a wake for a change after planned that came while the
// worker held it hands it out again.
func (b *Broker) ackPlanned(evalID, token string, doneIndex, planned uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, err := b.outstandingLocked(evalID, token)
	if err != nil {
		return err
	}
	b.observeLocked(evalID, "ack")
	b.finishLocked(u.eval)
	b.done[evalID] = doneIndex
	if e := b.again[evalID]; e != nil {
		delete(b.again, evalID)
		if e.GetModifyIndex() > doneIndex {
			b.held[evalID] = true
			b.readyLocked(e)
		}
	}
	if w, ok := b.wakeAgain[evalID]; ok {
		delete(b.wakeAgain, evalID)
		if w.change > planned && !b.held[evalID] {
			b.held[evalID] = true
			b.readyLocked(w.eval)
		}
	}
	return nil
}

// woken is a blocked evaluation made pending in memory by wake, and the
// index of the change that woke it.
type woken struct {
	eval   *pb.Evaluation
	change uint64
}

// wake hands out a blocked evaluation the feed judged worth another try
// because of a change at index change after the state it was planned
// from: in memory, with no raft write (Nomad's blocked evaluations are
// unblocked into its broker the same way). The state keeps it blocked
// until the worker's plan records its outcome, so a new leader, which
// wakes every blocked evaluation once, loses nothing. An evaluation the
// broker holds is not handed out twice: waiting, it is planned from a
// fresh state anyway; outstanding, it is handed out again at its ack if
// its worker planned from before change. A sighting older than the
// evaluation's last recorded outcome (its row's modify index below the
// index that finished it) is stale: the feed judges the newer row next.
func (b *Broker) wake(e *pb.Evaluation, change uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.enabled {
		return
	}
	id := e.GetId()
	if b.held[id] {
		if b.unacked[id] != nil && change > b.wakeAgain[id].change {
			b.wakeAgain[id] = woken{eval: e, change: change}
		}
		return
	}
	if idx, ok := b.done[id]; ok && e.GetModifyIndex() < idx {
		return
	}
	delete(b.done, id)
	b.held[id] = true
	b.readyLocked(e)
}

// forget releases an evaluation nack gave up on, once the caller has
// recorded its failure at index doneIndex (0 if that failed: the
// evaluation is then handed out again when next seen pending).
func (b *Broker) forget(evalID string, doneIndex uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.held, evalID)
	if doneIndex > 0 {
		b.done[evalID] = doneIndex
	}
}

// prune forgets finished evaluations whose outcome is at or below index,
// the evals table index of a snapshot the feed has read: no sighting of
// them as pending can come from an older snapshot any more.
func (b *Broker) prune(index uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, done := range b.done {
		if done <= index {
			delete(b.done, id)
		}
	}
}

// finishLocked forgets an outstanding evaluation and releases its job.
func (b *Broker) finishLocked(e *pb.Evaluation) {
	delete(b.unacked, e.GetId())
	delete(b.held, e.GetId())
	delete(b.nacks, e.GetId())
	job := e.GetJobId()
	delete(b.inFlight, job)
	if next := b.waiting[job]; len(next) > 0 {
		// The oldest waiting evaluation goes next; waiting ones are never
		// reordered by priority since they are all for one job.
		e, rest := next[0], next[1:]
		if len(rest) == 0 {
			delete(b.waiting, job)
		} else {
			b.waiting[job] = rest
		}
		heap.Push(&b.ready, e)
		b.notifyLocked()
	}
}

// errDeliveryLimit is nack's answer when the evaluation has been handed out
// as often as allowed: the caller marks it failed.
var errDeliveryLimit = errors.New("evaluation reached its delivery limit")

// nack returns evalID to the broker, to be handed out again after a
// backoff, or errDeliveryLimit when it has been delivered too often (it is
// then forgotten; the caller fails it in the state).
func (b *Broker) nack(evalID, token string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	u, err := b.outstandingLocked(evalID, token)
	if err != nil {
		return err
	}
	b.observeLocked(evalID, "nack")
	n := b.nacks[evalID]
	if n >= b.cfg.deliveryLimit {
		// It stays held until the caller has recorded the failure
		// (forget): meanwhile the state still shows it pending, and that
		// sighting is not new work.
		held := b.held[evalID]
		b.finishLocked(u.eval)
		b.held[evalID] = held
		delete(b.again, evalID)
		delete(b.wakeAgain, evalID)
		return fmt.Errorf("evaluation %s after %d deliveries: %w", evalID, n, errDeliveryLimit)
	}
	// The job stays in flight during the backoff, so its later evaluations
	// do not overtake this one. Handed out again, it is planned from a
	// fresh state: a wake meanwhile needs no second run.
	delete(b.unacked, evalID)
	delete(b.wakeAgain, evalID)
	delay := backoff.Backoff{Initial: b.cfg.nackDelay, Max: b.cfg.maxNackDelay}.Delay(n)
	e := u.eval
	b.delayed[evalID] = b.clock.AfterFunc(delay, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.delayed[evalID]; !ok {
			return
		}
		delete(b.delayed, evalID)
		delete(b.inFlight, e.GetJobId())
		b.readyLocked(e)
	})
	return nil
}

// Stats reports how many evaluations are ready, outstanding, waiting
// behind their job and delayed.
func (b *Broker) Stats() (ready, outstanding, waiting, delayed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.waiting {
		waiting += len(w)
	}
	return b.ready.Len(), len(b.unacked), waiting, len(b.delayed)
}

// evalHeap orders evaluations by priority (highest first), then by create
// index (oldest first), then ID, so the order is total.
type evalHeap []*pb.Evaluation

func (h evalHeap) Len() int { return len(h) }
func (h evalHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.GetPriority() != b.GetPriority() {
		return a.GetPriority() > b.GetPriority()
	}
	if a.GetCreateIndex() != b.GetCreateIndex() {
		return a.GetCreateIndex() < b.GetCreateIndex()
	}
	return a.GetId() < b.GetId()
}
func (h evalHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *evalHeap) Push(x any)   { *h = append(*h, x.(*pb.Evaluation)) }
func (h *evalHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
