package server

import (
	"context"
	"fmt"
	"io"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
)

// enqueueTimeout bounds how long a proposal may wait to enter raft's queue.
const enqueueTimeout = 30 * time.Second

// raftApply proposes one command and waits until it is applied, returning
// the raft index it was applied at or the command's error. Only the leader
// may call it; followers forward writes (see forwardInterceptor).
//
// It waits no longer than ctx: when the caller gives up, or the server
// shuts down, it returns at once — the command may still commit, so the
// error says so. Raft's enqueue timeout remains the bound when ctx has no
// deadline.
func (s *Server) raftApply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return 0, fmt.Errorf("encoding %s: %w", t, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s on server %s was not proposed: %w", t, s.cfg.Name, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.shutdownCtx, cancel)
	defer stop()
	start := time.Now()
	idx, err := fsm.ResultOf(wctx, s.raft.Apply(buf, enqueueTimeout))
	switch {
	case err == nil:
	case ctx.Err() != nil:
		err = fmt.Errorf("%s on server %s: %w", t, s.cfg.Name, err)
	case s.shutdownCtx.Err() != nil:
		// The command may still commit; the caller must retry elsewhere.
		err = status.Errorf(codes.Unavailable, "server %s is shutting down; %s may or may not have been applied", s.cfg.Name, t)
	}
	metrics.MeasureSinceWithLabels([]string{"berth", "raft", "apply"}, start, []metrics.Label{{Name: "command", Value: t.String()}})
	return idx, err
}

// await waits for a raft future or for ctx to end, whichever comes first.
// Raft's futures offer only a blocking Error, so a goroutine waits on it;
// when ctx wins, that goroutine stays until raft answers, which raft bounds
// (a lost leadership fails VerifyLeader, the main loop serves the
// configuration).
func await(ctx context.Context, f raft.Future) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// timedFSM measures each command's apply time per command type. It lives
// here because the state machine itself may not read the clock.
type timedFSM struct {
	fsm *fsm.FSM
	// beforeApply is testHooks.beforeApply; nil outside tests.
	beforeApply func()
}

var (
	_ raft.FSM         = (*timedFSM)(nil)
	_ raft.BatchingFSM = (*timedFSM)(nil)
)

func (t *timedFSM) Apply(l *raft.Log) any {
	if t.beforeApply != nil {
		t.beforeApply()
	}
	start := time.Now()
	r := t.fsm.Apply(l)
	metrics.MeasureSinceWithLabels([]string{"berth", "fsm", "apply"}, start,
		[]metrics.Label{{Name: "command", Value: fsm.PeekType(l.Data).String()}})
	return r
}

// ApplyBatch applies a raft batch in one state-store transaction (see
// fsm.FSM.ApplyBatch) and reports each command's share of the batch's time,
// so the per-command metric means the same with or without batching.
func (t *timedFSM) ApplyBatch(logs []*raft.Log) []any {
	if t.beforeApply != nil {
		t.beforeApply()
	}
	start := time.Now()
	out := t.fsm.ApplyBatch(logs)
	var commands int
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			commands++
		}
	}
	if commands == 0 {
		return out
	}
	share := float32(time.Since(start).Seconds()*1000) / float32(commands)
	for _, l := range logs {
		if l.Type == raft.LogCommand {
			metrics.AddSampleWithLabels([]string{"berth", "fsm", "apply"}, share,
				[]metrics.Label{{Name: "command", Value: fsm.PeekType(l.Data).String()}})
		}
	}
	return out
}

func (t *timedFSM) Snapshot() (raft.FSMSnapshot, error) { return t.fsm.Snapshot() }

func (t *timedFSM) Restore(r io.ReadCloser) error { return t.fsm.Restore(r) }
