package fsm

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// FSM is berth's raft state machine. Raft calls Apply with each committed
// command, Snapshot to compact the log, and Restore to install a snapshot;
// everyone else reads the state through State.
//
// FSM deliberately does not implement raft.BatchingFSM: a batch could share a
// memdb transaction only if a failed command could be rolled back alone, and
// memdb has no savepoints. Applying a batch entry by entry is what raft does
// for a plain FSM anyway.
type FSM struct {
	logger hclog.Logger
	state  atomic.Pointer[StateStore]
}

var _ raft.FSM = (*FSM)(nil)

// New returns an FSM over an empty state store. logger may be nil.
func New(logger hclog.Logger) *FSM {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	f := &FSM{logger: logger.Named("fsm")}
	f.state.Store(newStateStore())
	return f
}

// State returns the current state store. After a Restore it returns the new
// store; a caller holding the old one learns through its AbandonCh.
func (f *FSM) State() *StateStore {
	return f.state.Load()
}

// ApplyResult is what Apply returns for every command entry, and so what
// raft's ApplyFuture.Response holds on the server that proposed it. Use
// ResultOf rather than asserting the type.
type ApplyResult struct {
	// Index is the raft index of the entry.
	Index uint64
	// Type is the entry's command type (0 for an empty entry), for metrics.
	Type MessageType
	// Err is why the command was not applied; the state is then unchanged.
	Err error
}

// Apply applies one committed raft log entry. It implements raft.FSM and
// always returns a non-nil *ApplyResult; see ApplyLog.
func (f *FSM) Apply(log *raft.Log) any {
	return f.ApplyLog(log)
}

// ApplyLog applies one committed raft log entry and returns its typed result.
// A wrapper that times commands (the fsm package reads no clock) calls it
// from its own Apply and labels the duration with the result's Type.
//
// A command that fails (unknown type, malformed, invalid, or refused by its
// apply function) changes nothing and reports why in Err; it never panics,
// since a panic in raft's apply goroutine would take the server down for a
// single bad entry. An unknown command type flagged IgnoreUnknownFlag is
// skipped with a warning and reports success.
func (f *FSM) ApplyLog(log *raft.Log) *ApplyResult {
	res := &ApplyResult{Index: log.Index, Type: PeekType(log.Data)}
	if log.Type != raft.LogCommand {
		res.Err = fmt.Errorf("raft log entry %d is a %s entry, not a command", log.Index, log.Type)
		return res
	}
	if len(log.Data) == 0 {
		res.Err = fmt.Errorf("raft log entry %d: %w", log.Index, ErrEmptyCommand)
		f.logger.Error("cannot apply command", "index", log.Index, "error", res.Err)
		return res
	}
	c, ok := commands[res.Type]
	if !ok {
		if res.Type.Ignorable() {
			f.logger.Warn("skipping unknown command flagged ignorable", "type", uint8(res.Type), "index", log.Index)
			return res
		}
		res.Err = fmt.Errorf("raft log entry %d: %w", log.Index, unknownCommandError(res.Type))
		if res.Type != 0 {
			// Type 0 is never proposed; anything else came from a newer server.
			res.Err = fmt.Errorf("%w (proposed by a newer server: upgrade this one)", res.Err)
		}
		f.logger.Error("cannot apply command", "index", log.Index, "error", res.Err)
		return res
	}
	msg, err := c.decode(log.Data[1:])
	if err != nil {
		res.Err = fmt.Errorf("raft log entry %d: %w: %s: %w", log.Index, ErrMalformedCommand, c.name, err)
		f.logger.Error("cannot apply command", "index", log.Index, "error", res.Err)
		return res
	}
	err = f.State().write(log.Index, func(tx *writeTxn) error { return c.apply(tx, msg) })
	if err != nil {
		res.Err = fmt.Errorf("%s at index %d: %w", c.name, log.Index, err)
		f.logger.Debug("command refused", "index", log.Index, "error", res.Err)
	}
	return res
}

// Snapshot captures the current state for raft to persist. It is cheap: it
// pins an immutable version of the tables, and Persist streams it while
// Apply carries on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{state: f.State().Snapshot()}, nil
}

// Restore replaces the whole state with the snapshot read from rc and closes
// rc. The snapshot is read into a new store which is swapped in only when it
// has been read completely, so on any error (ErrSnapshotVersion,
// ErrSnapshotCorrupt, a read error) the current state is left as it was.
// Blocking queries on the replaced store are woken through its AbandonCh.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	restored, err := readSnapshot(rc)
	if err != nil {
		f.logger.Error("snapshot restore failed, keeping current state", "error", err)
		return err
	}
	old := f.state.Swap(restored)
	old.abandon(restored)
	latest, _ := restored.LatestIndex()
	f.logger.Info("restored state from snapshot", "latest_index", latest)
	return nil
}
