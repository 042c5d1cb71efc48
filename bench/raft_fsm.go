package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
)

// fsmKind is one side of the comparison: the state machine raft runs and
// how its answer to an applied command is judged.
type fsmKind struct {
	name   string
	newFSM func(logger hclog.Logger) raft.FSM
	// check fails unless resp, the FSM's answer to an applied command,
	// says the command was accepted, so a run never counts refused
	// commands as throughput.
	check func(resp any) error
}

var (
	// baselineKind is raft alone: same stores, transport, config and
	// payload bytes, an FSM that does nothing.
	baselineKind = fsmKind{
		name:   "baseline",
		newFSM: func(hclog.Logger) raft.FSM { return noopFSM{} },
		check: func(resp any) error {
			if resp != nil {
				return fmt.Errorf("no-op FSM answered %T, want nil", resp)
			}
			return nil
		},
	}
	// berthKind is berth's FSM, its answer read the way fsm.ResultOf reads
	// it.
	berthKind = fsmKind{
		name:   "berth",
		newFSM: func(l hclog.Logger) raft.FSM { return fsm.New(l) },
		check: func(resp any) error {
			res, ok := resp.(*fsm.ApplyResult)
			if !ok || res == nil {
				return fmt.Errorf("%w: %T", fsm.ErrUnexpectedResponse, resp)
			}
			return res.Err
		},
	}
)

// waitApplied is how a proposer of either kind waits: on the future itself,
// then kind's check of the FSM's answer. Both sides wait alike so the ratio
// measures the FSM alone. The server's raftApply waits through
// fsm.ResultOf, which adds a goroutine per proposal so that a caller's
// context can end the wait; that cost is the server's, not the FSM's, and
// raft bounds this wait anyway (it resolves every future when it applies
// the entry, loses leadership or shuts down).
func waitApplied(kind fsmKind, f raft.ApplyFuture) error {
	if err := f.Error(); err != nil {
		return fmt.Errorf("raft apply: %w", err)
	}
	return kind.check(f.Response())
}

// noopFSM is the baseline state machine: Apply does nothing and snapshots
// are empty, so whatever a run costs beyond it is berth's FSM.
type noopFSM struct{}

var (
	_ raft.FSM         = noopFSM{}
	_ raft.FSMSnapshot = noopSnapshot{}
)

func (noopFSM) Apply(*raft.Log) any { return nil }

func (noopFSM) Snapshot() (raft.FSMSnapshot, error) { return noopSnapshot{}, nil }

func (noopFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	_, err := io.Copy(io.Discard, rc)
	return err
}

type noopSnapshot struct{}

func (noopSnapshot) Persist(sink raft.SnapshotSink) error { return sink.Close() }

func (noopSnapshot) Release() {}

// fsmOnlyCost is the berth FSM's own cost per command, outside raft.
type fsmOnlyCost struct {
	wall  time.Duration // per command, median over repetitions
	cpu   time.Duration // process CPU per command (GC included), median
	cpuOK bool
	ops   int // commands per repetition, each a new node
}

// fsmOnlyBatch is how many entries measureFSMOnly hands the FSM at once:
// raft's MaxAppendEntries (64 by default), the batch raft's FSM goroutine
// gets under load, when it applies committed entries through ApplyBatch.
const fsmOnlyBatch = 64

// measureFSMOnly applies reps × ops NodeRegister entries with distinct node
// IDs directly to fresh berth FSMs, in batches the way raft's FSM goroutine
// hands them over under load, and times the applying alone: minting the
// entries is left out of both clocks. Nothing else runs in the process by
// then, so its CPU time is the FSM's, including the garbage collection the
// FSM's allocations cause.
func measureFSMOnly(ctx context.Context, p *payloads, ops, reps int) (fsmOnlyCost, error) {
	var wall, cpu []time.Duration
	cpuOK := true
	logs := make([]*raft.Log, fsmOnlyBatch)
	for range reps {
		f := fsm.New(nil)
		var spentWall, spentCPU time.Duration
		for index := uint64(1); index <= uint64(ops); {
			if err := ctx.Err(); err != nil {
				return fsmOnlyCost{}, err
			}
			n := min(fsmOnlyBatch, ops-int(index)+1)
			for i := range n {
				logs[i] = &raft.Log{Index: index + uint64(i), Term: 1, Type: raft.LogCommand, Data: p.next()}
			}
			cpu0, ok0 := processCPU()
			start := time.Now()
			out := f.ApplyBatch(logs[:n])
			spentWall += time.Since(start)
			cpu1, ok1 := processCPU()
			spentCPU += cpu1 - cpu0
			cpuOK = cpuOK && ok0 && ok1
			for i, r := range out {
				if err := berthKind.check(r); err != nil {
					return fsmOnlyCost{}, fmt.Errorf("FSM-only apply at index %d: %w", logs[i].Index, err)
				}
			}
			index += uint64(n)
		}
		nodes, err := f.State().Nodes(nil)
		if err != nil {
			return fsmOnlyCost{}, fmt.Errorf("FSM-only: reading nodes: %w", err)
		}
		if len(nodes) != ops {
			return fsmOnlyCost{}, fmt.Errorf("FSM-only: %d nodes in the table after %d registrations of distinct nodes", len(nodes), ops)
		}
		wall = append(wall, spentWall/time.Duration(ops))
		cpu = append(cpu, spentCPU/time.Duration(ops))
		runtime.GC() // the next repetition starts from an empty heap
	}
	return fsmOnlyCost{wall: median(wall), cpu: median(cpu), cpuOK: cpuOK, ops: ops}, nil
}

// median returns the middle value of xs (the lower middle for an even
// count); xs is not modified.
func median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
