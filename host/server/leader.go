package server

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/fsm"
)

// monitorLeadership runs the leader loops while this server leads and stops
// them when it loses leadership. It also counts cluster-wide leader changes
// as this server observes them.
func (s *Server) monitorLeadership() {
	observations := make(chan raft.Observation, 16)
	observer := raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(observer)
	defer s.raft.DeregisterObserver(observer)

	var (
		stopLeader context.CancelFunc
		leaderDone chan struct{}
	)
	stop := func() {
		if stopLeader != nil {
			stopLeader()
			<-leaderDone
			stopLeader = nil
		}
	}
	defer stop()
	for {
		select {
		case <-s.shutdownCtx.Done():
			return
		case o := <-observations:
			lo := o.Data.(raft.LeaderObservation)
			metrics.IncrCounter([]string{"berth", "raft", "leader_changes"}, 1)
			s.logger.Info("leader changed", "leader_id", lo.LeaderID, "leader_addr", lo.LeaderAddr)
		case isLeader := <-s.leaderNotify:
			if isLeader && stopLeader == nil {
				ctx, cancel := context.WithCancel(s.shutdownCtx)
				stopLeader, leaderDone = cancel, make(chan struct{})
				go func() {
					defer close(leaderDone)
					s.leaderLoop(ctx)
				}()
			} else if !isLeader {
				stop()
			}
		}
	}
}

// leaderLoop holds leadership duties until ctx ends.
func (s *Server) leaderLoop(ctx context.Context) {
	s.logger.Info("cluster leadership acquired")
	defer s.logger.Info("cluster leadership lost")
	acquired := time.Now()
	defer s.heartbeats.Stop()
	defer s.ready.clear()
	defer s.evals.Broker().SetEnabled(false)

	if h := s.opts.hooks; h != nil && h.beforeBarrier != nil {
		h.beforeBarrier(ctx)
	}
	// Apply everything committed by earlier leaders before acting on state.
	// The term is read before the barrier: a barrier that succeeds was
	// committed in this term or a later one, so readiness recorded with
	// this term is true exactly while raft's term has not moved on.
	term := s.raft.CurrentTerm()
	if !s.barrier(ctx) {
		return
	}
	barrierPassed := time.Now()
	s.heartbeats.Start()
	// Ready now, before recording this server in state: requests must not
	// wait for a second commit.
	s.ready.set(term)
	// Where a failover's seconds go once raft elected this server.
	s.logger.Info("leader ready", "barrier", barrierPassed.Sub(acquired), "heartbeat_timers", time.Since(barrierPassed))
	for {
		if !s.leadOnce(ctx) {
			return
		}
		// The state was replaced while this server leads (operator
		// snapshot restore): the duties start over from the restored
		// store, as a new leader's would.
		s.logger.Info("state restored from a snapshot: restarting the leader's duties")
		// A command the old duties proposed while raft was restoring (a
		// plan, an attachment update, a drain write) waited in raft's
		// queue and is applied to the restored store after the restore;
		// the old duties returned without waiting for it. The barrier,
		// queued behind it, makes the new duties start from a store that
		// holds it, so they do not plan an evaluation again that it
		// already placed.
		if h := s.opts.hooks; h != nil && h.beforeBarrier != nil {
			h.beforeBarrier(ctx)
		}
		if !s.barrier(ctx) {
			return
		}
		s.heartbeats.Rearm()
	}
}

// barrier waits until every command raft has queued so far is applied,
// retrying until it passes (true) or ctx ends (false).
func (s *Server) barrier(ctx context.Context) bool {
	if !awaitBarrier(ctx, func() raft.Future { return s.raft.Barrier(time.Minute) }, s.logger) {
		return false
	}
	// A snapshot raft installed just before may still be decoding
	// (fsm.DeferRestores): the duties start on its state.
	return s.fsm.WaitRestored(ctx)
}

// awaitBarrier is barrier over any raft: it waits for each try's future
// only until ctx ends. raft does not answer every future it took when it
// shuts down (one it had handed to its FSM goroutine may be dropped), and
// a leader loop blocked on such a future held the server's Shutdown for
// good (seen under load in a CI run: 8 minutes in Shutdown's wait).
func awaitBarrier(ctx context.Context, barrier func() raft.Future, logger hclog.Logger) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		err := fsm.Await(ctx, barrier())
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		logger.Error("leader barrier failed", "error", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// leadOnce runs the leader's duties over the current state store until ctx
// ends (it returns false) or a snapshot restore replaces the store (it
// returns true once every duty has stopped). Every duty keeps something
// from the store it started on that a restore makes wrong: watches on the
// replaced tables (which never fire again), the broker's record of which
// evaluations it finished and at which index (a restored evaluation that
// is pending again would be ignored as done), the GC's index-to-time
// table, the volume loops' retry holds. Starting them over is simpler and
// surer than teaching each to notice.
func (s *Server) leadOnce(ctx context.Context) (restored bool) {
	store := s.fsm.State()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var duties sync.WaitGroup
	spawn := func(f func()) {
		duties.Add(1)
		s.goRun(func() {
			defer duties.Done()
			f()
		})
	}
	s.evals.Broker().SetEnabled(true)
	s.evals.Run(dctx, spawn)
	spawn(func() { s.drainer.Run(dctx) })
	spawn(func() { s.runGC(dctx) })
	spawn(func() { s.volumes.Run(dctx) })
	s.duties.set(store)
	defer s.duties.set(nil)
	if err := s.discovery.ensureRegistered(dctx); err != nil {
		s.logger.Warn("recording leader in state", "error", err)
	}
	select {
	case <-ctx.Done():
		// Leadership ended: the duties stop on their own, as they always
		// did; the next leadership does not wait for them here.
		return false
	case <-store.AbandonCh():
	}
	cancel()
	// The old duties must be gone before the new start, or a feed still
	// reading the replaced store could hand the fresh broker evaluations
	// the restored state does not have.
	duties.Wait()
	s.evals.Broker().SetEnabled(false)
	return ctx.Err() == nil
}

// dutiesStore records which state store the leader's duties run on (nil
// while they run on none). Every change closes the current channel and
// makes a new one, as readiness does.
type dutiesStore struct {
	mu      sync.Mutex
	store   *fsm.StateStore
	changed chan struct{}
}

func newDutiesStore() *dutiesStore {
	return &dutiesStore{changed: make(chan struct{})}
}

func (d *dutiesStore) set(st *fsm.StateStore) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.store = st
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *dutiesStore) state() (*fsm.StateStore, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.store, d.changed
}

// awaitDutiesOn returns once this server's leader duties run on st, or
// once it no longer leads (whoever leads next starts on the current
// state), or once another restore replaced st (the duties start on the
// newer store, never on st), or with ctx's error.
func (s *Server) awaitDutiesOn(ctx context.Context, st *fsm.StateStore) error {
	if h := s.opts.hooks; h != nil && h.awaitingDuties != nil {
		h.awaitingDuties(st)
	}
	for {
		cur, changed := s.duties.state()
		if cur == st || !s.IsLeader() {
			return nil
		}
		select {
		case <-st.AbandonCh():
			return nil
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.shutdownCtx.Done():
			return nil
		}
	}
}

// readiness says whether this server's leadership is ready to serve: set
// with the raft term whose barrier passed, cleared when the leader loop
// ends. Raft can lose and win leadership again before the leader loop hears
// of the loss, so readiness counts only while raft's term is still the
// recorded one: a new term needs its own barrier. Requests that reach a
// just-elected leader wait on it; every change closes the current channel
// and makes a new one, so they wake on the change, not on a poll.
type readiness struct {
	mu      sync.Mutex
	term    uint64 // 0: not ready
	changed chan struct{}
}

func newReadiness() *readiness {
	return &readiness{changed: make(chan struct{})}
}

// set records that the barrier of term passed.
func (r *readiness) set(term uint64) { r.change(term) }

// clear records that the leadership ended.
func (r *readiness) clear() { r.change(0) }

func (r *readiness) change(term uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.term = term
	close(r.changed)
	r.changed = make(chan struct{})
}

// state returns the term whose barrier passed (0 if none) and the channel
// closed at its next change, read together so no change can fall between
// them.
func (r *readiness) state() (uint64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.term, r.changed
}

// readyIn reports whether the barrier of term has passed.
func (r *readiness) readyIn(term uint64) bool {
	t, _ := r.state()
	return t != 0 && t == term
}

// leaderReady reports whether this server leads and has passed the
// barrier of its current term.
func (s *Server) leaderReady() bool {
	return s.IsLeader() && s.ready.readyIn(s.raft.CurrentTerm())
}

// awaitLeaderReady returns once this server, which raft says leads, has
// applied everything earlier leaders committed, so a leader-only or
// consistent request never sees older state than an acknowledged write.
// It waits at most the leader wait, and ends with Unavailable (naming this
// server) when that passes or leadership is lost meanwhile, and with the
// caller's error when ctx ends first.
func (s *Server) awaitLeaderReady(ctx context.Context, method string) error {
	// Every leader-only request passes here: the common case costs two
	// atomic loads and one uncontended lock.
	if s.leaderReady() {
		return nil
	}
	if h := s.opts.hooks; h != nil && h.waitingForBarrier != nil {
		h.waitingForBarrier(method, 1)
		defer h.waitingForBarrier(method, -1)
	}
	bound := time.NewTimer(s.opts.leaderWait)
	defer bound.Stop()
	for waited := false; ; waited = true {
		// Leadership is checked first, and the term with readiness: a
		// readiness still set from a leadership raft has just ended, or
		// from an earlier term of this server, must not let a request
		// through.
		if !s.IsLeader() {
			if waited {
				return status.Errorf(codes.Unavailable, "server %s lost leadership while it waited for its leader barrier; retry", s.cfg.Name)
			}
			return status.Errorf(codes.Unavailable, "server %s is no longer the leader; retry", s.cfg.Name)
		}
		term, changed := s.ready.state()
		if term != 0 && term == s.raft.CurrentTerm() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return status.Errorf(status.FromContextError(ctx.Err()).Code(),
				"waiting for server %s to finish applying the previous leader's log: %v", s.cfg.Name, ctx.Err())
		case <-bound.C:
			return status.Errorf(codes.Unavailable, "server %s was elected leader but is still applying the previous leader's log after %s; retry", s.cfg.Name, s.opts.leaderWait)
		case <-s.shutdownCtx.Done():
			return status.Errorf(codes.Unavailable, "server %s is shutting down", s.cfg.Name)
		}
	}
}
