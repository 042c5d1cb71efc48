package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
)

// ErrCommandTooLarge is returned by raftApply for a command whose encoding
// is over rpc.MaxMessageSize, the limit of every hop (a snapshot install
// or a forwarded write would carry it). Jobs are bounded well below it at
// submit (server.job_max_size); this is the last guard, before the log.
var ErrCommandTooLarge = errcode.New(codes.InvalidArgument, "raft command over the message size limit")

// enqueueTimeout bounds how long a proposal may wait to enter raft's queue.
const enqueueTimeout = 30 * time.Second

// raftTimeout is the enqueue timeout for a raft call made on behalf of ctx:
// raft's own bound, or the time left before ctx's deadline when that comes
// sooner. Raft's Apply, AddVoter and RemoveServer block before any future
// exists while raft's leader loop takes no commands (a stalled disk, a slow
// state machine), and only this timeout ends that wait. It returns ctx's
// error when ctx has already ended: a command must not be handed to raft
// for a caller that gave up, since it would commit with nobody told.
func raftTimeout(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	d := enqueueTimeout
	if deadline, ok := ctx.Deadline(); ok {
		left := time.Until(deadline)
		if left <= 0 {
			// Raft reads a zero timeout as "no bound".
			return 0, context.DeadlineExceeded
		}
		d = min(d, left)
	}
	return d, nil
}

// callerDeadline turns raft's enqueue timeout, when it was the caller's
// deadline (see raftTimeout), into that deadline's error, so the caller
// sees DeadlineExceeded rather than Unavailable.
func callerDeadline(err error) error {
	return fmt.Errorf("raft took no command before the caller's deadline (%v): %w", err, context.DeadlineExceeded)
}

// raftApply proposes one command and waits until it is applied, returning
// the raft index it was applied at or the command's error. Only the leader
// may call it; followers forward writes (see forwardInterceptor).
//
// It waits no longer than ctx, its deadline bounding raft's queue too:
// when the caller gives up, or the server shuts down, it returns at once —
// the command may still commit, so the error says so. A ctx that has
// already ended proposes nothing.
func (s *Server) raftApply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	res, err := s.raftApplyResult(ctx, t, msg)
	if res == nil {
		return 0, err
	}
	return res.Index, err
}

// raftApplyResult is raftApply for commands whose apply returns a value
// (a plan's result): the whole ApplyResult comes back. On an error from
// the command itself the result is returned too, with its index.
func (s *Server) raftApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", t, err)
	}
	if len(buf) > rpc.MaxMessageSize {
		return nil, fmt.Errorf("%s of %d bytes, over %d: %w", t, len(buf), rpc.MaxMessageSize, ErrCommandTooLarge)
	}
	timeout, err := raftTimeout(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s on server %s was not proposed: %w", t, s.cfg.Name, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.shutdownCtx, cancel)
	defer stop()
	if h := s.opts.hooks; h != nil && h.proposing != nil {
		h.proposing(t)
	}
	start := time.Now()
	res, err := fsm.FullResultOf(wctx, s.raft.Apply(buf, timeout))
	switch {
	case err == nil:
	case errors.Is(err, raft.ErrEnqueueTimeout) && timeout < enqueueTimeout:
		err = fmt.Errorf("%s on server %s was not proposed: %w", t, s.cfg.Name, callerDeadline(err))
	case ctx.Err() != nil:
		err = fmt.Errorf("%s on server %s: %w", t, s.cfg.Name, err)
	case s.shutdownCtx.Err() != nil:
		// The command may still commit; the caller must retry elsewhere.
		err = status.Errorf(codes.Unavailable, "server %s is shutting down; %s may or may not have been applied", s.cfg.Name, t)
	}
	metrics.MeasureSinceWithLabels([]string{"berth", "raft", "apply"}, start, []metrics.Label{{Name: "command", Value: t.String()}})
	return res, err
}

// awaitCall runs a raft call that takes no timeout (VerifyLeader,
// GetConfiguration) and waits for its future, or for ctx to end. Those
// calls block before any future exists while raft's leader loop is busy,
// so the call itself runs on the goroutine that waits; neither changes
// state, so nothing is lost when the caller leaves first. A ctx that has
// already ended makes no call.
func awaitCall[F raft.Future](ctx context.Context, call func() F) (F, error) {
	var zero F
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	issued := make(chan F, 1)
	go func() { issued <- call() }()
	select {
	case f := <-issued:
		return f, fsm.Await(ctx, f)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// timedFSM measures each command's apply time per command type. It lives
// here because the state machine itself may not read the clock.
type timedFSM struct {
	fsm *fsm.FSM
	// beforeApply is testHooks.beforeApply; nil outside tests.
	beforeApply func(logs []*raft.Log)
	// beforeRestore is testHooks.beforeRestore; nil outside tests.
	beforeRestore func()
}

var (
	_ raft.FSM         = (*timedFSM)(nil)
	_ raft.BatchingFSM = (*timedFSM)(nil)
)

func (t *timedFSM) Apply(l *raft.Log) any {
	if t.beforeApply != nil {
		t.beforeApply([]*raft.Log{l})
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
		t.beforeApply(logs)
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

func (t *timedFSM) Restore(r io.ReadCloser) error {
	if t.beforeRestore != nil {
		t.beforeRestore()
	}
	return t.fsm.Restore(r)
}
