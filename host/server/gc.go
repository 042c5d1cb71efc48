package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"berth.dev/berth/internal/versions"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
)

// Garbage collection: the leader proposes, every few minutes and on
// `berth system gc`, a GCCommand naming what fsm.GCCandidates finds
// finished (the rules are in fsm/apply_gc.go); the state machine removes
// only what is still collectable when the command applies, so nothing a
// live object references goes, whatever changed between the proposal and
// its apply.
//
// Age is measured in raft indexes, which the state carries, through a
// time table the leader keeps in memory: every interval it records the
// latest index with the time, and "older than an hour" becomes "last
// modified before the index recorded an hour ago". A new leader's table is
// empty, so it collects by age only once it has led for the threshold;
// a forced collection (`system gc`) takes everything finished at once.

// gcConfig holds the collector's settings.
type gcConfig struct {
	interval  time.Duration
	threshold time.Duration
	// batch bounds how many objects of each kind one command names.
	batch int
}

func defaultGCConfig() gcConfig {
	return gcConfig{interval: 5 * time.Minute, threshold: time.Hour, batch: 5000}
}

// timeTable maps times to the raft index the leader had applied by then.
type timeTable struct {
	mu      sync.Mutex
	entries []timeIndex
}

type timeIndex struct {
	at    time.Time
	index uint64
}

func (t *timeTable) record(at time.Time, index uint64, keep time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = append(t.entries, timeIndex{at, index})
	// Keep one entry older than keep, the one answers are read from.
	for len(t.entries) > 1 && at.Sub(t.entries[1].at) >= keep {
		t.entries = t.entries[1:]
	}
}

// indexAt returns the latest index recorded at or before at, 0 if none.
func (t *timeTable) indexAt(at time.Time) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var idx uint64
	for _, e := range t.entries {
		if e.at.After(at) {
			break
		}
		idx = e.index
	}
	return idx
}

func (t *timeTable) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = nil
}

// runGC records the time table and collects garbage every interval until
// ctx ends. GC is the one periodic loop among the leader's: nothing waits
// on it.
func (s *Server) runGC(ctx context.Context) {
	s.gcTimes.reset()
	for {
		now := s.cfg.Clock.Now()
		if idx, err := s.fsm.State().LatestIndex(); err == nil {
			s.gcTimes.record(now, idx, s.gc.threshold)
		}
		if _, err := s.collectGarbage(ctx, false); err != nil && ctx.Err() == nil {
			s.logger.Warn("garbage collection", "error", err)
		}
		if _, err := s.collectExpiredTokens(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("garbage collection of expired ACL tokens", "error", err)
		}
		t := time.NewTimer(s.gc.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// gcKeepsReleasingSince is the first berth version whose servers keep,
// in GC, an alloc holding a releasing claim on a live node (GCCommand
// keep_releasing_claims).
var gcKeepsReleasingSince = versions.MustConstraint(">= " + gcKeepsReleasingSinceVersion)

const gcKeepsReleasingSinceVersion = "0.1.0-dev.3"

// collectGarbage proposes one GCCommand with what is collectable and older
// than the threshold (forced: everything collectable) and reports how much
// it named; the apply may keep some that came back to life meanwhile.
func (s *Server) collectGarbage(ctx context.Context, force bool) (*pb.GCResponse, error) {
	st := s.fsm.State()
	var before uint64
	if force {
		latest, err := st.LatestIndex()
		if err != nil {
			return nil, err
		}
		before = latest + 1
	} else {
		before = s.gcTimes.indexAt(s.cfg.Clock.Now().Add(-s.gc.threshold))
	}
	resp := &pb.GCResponse{Meta: &pb.WriteMeta{}}
	if before == 0 {
		return resp, nil
	}
	cmd, err := st.Snapshot().GCCandidates(before, s.gc.batch)
	if err != nil {
		return nil, err
	}
	resp.Evals, resp.Allocs, resp.Jobs = int32(len(cmd.GetEvalIds())), int32(len(cmd.GetAllocIds())), int32(len(cmd.GetJobIds()))
	if resp.Evals+resp.Allocs+resp.Jobs == 0 {
		return resp, nil
	}
	cmd.KeepReleasingClaims = s.requireServersAt(gcKeepsReleasingSince, gcKeepsReleasingSinceVersion,
		"allocs holding a releasing claim kept from GC") == nil
	cmd.CollectedAt = s.cfg.Clock.Now().UnixNano()
	idx, err := s.raftApply(ctx, fsm.GC, cmd)
	if err != nil {
		return nil, fmt.Errorf("garbage collection of %d evaluations, %d allocs, %d jobs: %w", resp.Evals, resp.Allocs, resp.Jobs, err)
	}
	resp.Meta.Index = idx
	s.logger.Info("garbage collected", "evals", resp.Evals, "allocs", resp.Allocs, "jobs", resp.Jobs, "forced", force)
	return resp, nil
}
