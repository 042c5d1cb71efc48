package server

import (
	"context"
	"sync"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	defer s.heartbeats.stop()
	defer s.ready.set(false)

	if h := s.cfg.hooks; h != nil && h.beforeBarrier != nil {
		h.beforeBarrier(ctx)
	}
	// Apply everything committed by earlier leaders before acting on state.
	for {
		if ctx.Err() != nil {
			return
		}
		err := s.raft.Barrier(time.Minute).Error()
		if err == nil {
			break
		}
		s.logger.Error("barrier before leadership failed", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	if err := s.discovery.ensureRegistered(ctx); err != nil {
		s.logger.Warn("recording leader in state", "error", err)
	}
	s.heartbeats.start()
	s.ready.set(true)
	<-ctx.Done()
}

// readiness says whether this server's leadership is ready to serve: set
// once its barrier passed, cleared when leadership ends. Requests that
// reach a just-elected leader wait on it; every change closes the current
// channel and makes a new one, so they wake on the change, not on a poll.
type readiness struct {
	mu      sync.Mutex
	ready   bool
	changed chan struct{}
	// waiting counts the requests waiting now, by method (tests watch it).
	waiting map[string]int
}

func newReadiness() *readiness {
	return &readiness{changed: make(chan struct{}), waiting: make(map[string]int)}
}

func (r *readiness) set(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready = v
	close(r.changed)
	r.changed = make(chan struct{})
}

// state returns readiness and the channel closed at its next change, read
// together so no change can fall between them.
func (r *readiness) state() (bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, r.changed
}

func (r *readiness) addWaiter(method string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waiting[method] += n
	if r.waiting[method] == 0 {
		delete(r.waiting, method)
	}
}

func (r *readiness) isReady() bool {
	ready, _ := r.state()
	return ready
}

// waiters returns how many requests for method wait now.
func (r *readiness) waiters(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting[method]
}

// awaitLeaderReady returns once this server, which raft says leads, has
// applied everything earlier leaders committed, so a leader-only or
// consistent request never sees older state than an acknowledged write.
// It waits at most the leader wait, and ends with Unavailable (naming this
// server) when that passes or leadership is lost meanwhile, and with the
// caller's error when ctx ends first.
func (s *Server) awaitLeaderReady(ctx context.Context, method string) error {
	s.ready.addWaiter(method, 1)
	defer s.ready.addWaiter(method, -1)
	bound := time.NewTimer(s.cfg.leaderWait)
	defer bound.Stop()
	for {
		// Leadership is checked first: a readiness flag still set from a
		// leadership raft has just ended must not let a request through.
		if !s.IsLeader() {
			return status.Errorf(codes.Unavailable, "server %s lost leadership while it waited for its leader barrier; retry", s.cfg.Name)
		}
		ready, changed := s.ready.state()
		if ready {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return status.Errorf(status.FromContextError(ctx.Err()).Code(),
				"waiting for server %s to finish applying the previous leader's log: %v", s.cfg.Name, ctx.Err())
		case <-bound.C:
			return status.Errorf(codes.Unavailable, "server %s was elected leader but is still applying the previous leader's log after %s; retry", s.cfg.Name, s.cfg.leaderWait)
		case <-s.shutdownCtx.Done():
			return status.Errorf(codes.Unavailable, "server %s is shutting down", s.cfg.Name)
		}
	}
}
