package server

import (
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
func (s *Server) raftApply(t fsm.MessageType, msg proto.Message) (uint64, error) {
	buf, err := fsm.Encode(t, msg)
	if err != nil {
		return 0, fmt.Errorf("encoding %s: %w", t, err)
	}
	start := time.Now()
	idx, err := fsm.ResultOf(s.shutdownCtx, s.raft.Apply(buf, enqueueTimeout))
	if err != nil && s.shutdownCtx.Err() != nil {
		// The command may still commit; the caller must retry elsewhere.
		err = status.Errorf(codes.Unavailable, "server %s is shutting down; %s may or may not have been applied", s.cfg.Name, t)
	}
	metrics.MeasureSinceWithLabels([]string{"berth", "raft", "apply"}, start, []metrics.Label{{Name: "command", Value: t.String()}})
	return idx, err
}

// timedFSM measures each command's apply time per command type. It lives
// here because the state machine itself may not read the clock.
type timedFSM struct {
	fsm *fsm.FSM
}

var (
	_ raft.FSM         = (*timedFSM)(nil)
	_ raft.BatchingFSM = (*timedFSM)(nil)
)

func (t *timedFSM) Apply(l *raft.Log) any {
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
