package server

import (
	"context"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
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
	defer s.heartbeats.stopAll()
	defer s.leaderReady.Store(false)

	// Apply everything committed by earlier leaders before acting on state.
	for {
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
	if err := s.discovery.ensureRegistered(); err != nil {
		s.logger.Warn("recording leader in state", "error", err)
	}
	s.heartbeats.initialize()
	s.leaderReady.Store(true)
	<-ctx.Done()
}
