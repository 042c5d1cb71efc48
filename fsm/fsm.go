package fsm

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
)

// FSM is berth's raft state machine. Raft calls Apply with each committed
// command, Snapshot to compact the log, and Restore to install a snapshot;
// everyone else reads the state through State.
//
// FSM implements raft.BatchingFSM: raft hands it every batch of committed
// entries, which it applies in one memdb transaction (see ApplyBatch).
type FSM struct {
	logger hclog.Logger
	schema schema
	state  atomic.Pointer[StateStore]
	// turn is what blocking queries a restore woke wait (SetQueryTurn).
	turn queryTurns
	// offered is the checked snapshot offered to the next Restore
	// (OfferRestore).
	offered offerSlot
	// deferring turns deferred restores on (DeferRestores); pending is
	// the one still decoding (restore_deferred.go). deferredHook runs
	// before a deferred decoding starts, deferredFailed instead of ending
	// the process when it fails (tests).
	deferring      atomic.Bool
	pending        atomic.Pointer[pendingRestore]
	deferredHook   func()
	deferredFailed func(error)
	// describeRestore names a deferred restore's snapshot in its logs
	// (DescribeRestores); closed is set by Close.
	describeRestore func() []any
	closed          atomic.Bool
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// New returns an FSM over an empty state store. logger may be nil.
func New(logger hclog.Logger) *FSM {
	return newFSM(logger, productionSchema())
}

// newFSM returns an FSM over an empty store of s's tables that applies s's
// commands. Tests build FSMs of their own tables and commands with it.
func newFSM(logger hclog.Logger, s schema) *FSM {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	f := &FSM{logger: logger.Named("fsm"), schema: s}
	st := newStateStore(s)
	st.turns = &f.turn
	f.state.Store(st)
	return f
}

// State returns the current state store. After a Restore it returns the new
// store; a caller holding the old one learns through its AbandonCh.
//
// While a restore raft counts as done is still decoding (DeferRestores),
// State returns the store it replaces, as it did while a restore decoded
// before returning: a follower's reads may be stale. What must see every
// entry raft applied — the applies, snapshots and restores, and a new
// leader's duties (WaitRestored after its barrier) — waits for it.
func (f *FSM) State() *StateStore {
	return f.state.Load()
}

// settled is the current store once no deferred restore is decoding: the
// store raft's applies and snapshots act on. A decoding that failed (only
// once the FSM is closed, or under a test hook) leaves the replaced store,
// with the error.
func (f *FSM) settled() (*StateStore, error) {
	err := f.waitRestored()
	return f.state.Load(), err
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
	// Response is what an applied command answers beyond its index, nil
	// for most: a PlanApply answers a *pb.PlanResult (read it with
	// PlanResultOf). It is built in the apply and owned by the proposer.
	Response proto.Message
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
	c, msg, ok := f.decodeEntry(log, res)
	if !ok {
		return res
	}
	st, _ := f.settled() // a failed decoding ends the process, or the server is closing
	tx := st.beginWrite()
	defer tx.abort()
	tx.index = log.Index
	err := c.apply(tx, msg)
	if err == nil {
		err = tx.commit()
	}
	if err != nil {
		f.refused(res, c, err)
		return res
	}
	res.Response = tx.result
	return res
}

// ApplyBatch applies a batch of committed raft log entries and returns one
// response per entry: an *ApplyResult for each command entry, exactly what
// Apply would have returned for it, and nil for the other entries raft
// passes (configuration changes), as raft gives a plain FSM's non-command
// entries no response. It implements raft.BatchingFSM.
//
// The batch's commands share one memdb transaction, committed once, so
// watchers wake once per batch and the copy-on-write trees and table indexes
// are written once per batch rather than once per command. Readers see the
// state before the batch or after it, never part of it.
//
// A command that fails still changes nothing and gets the error it would
// get applied alone: every apply function refuses a command before writing
// anything, so a refused command leaves the shared transaction as it found
// it and the batch carries on. Should a command fail after it has written
// (memdb cannot roll back part of a transaction), the whole batch is
// discarded and applied again one command per transaction, as Apply does.
func (f *FSM) ApplyBatch(logs []*raft.Log) []any {
	out := make([]any, len(logs))
	if f.applyBatch(logs, out) {
		return out
	}
	for i, log := range logs {
		out[i] = nil
		if log.Type == raft.LogCommand {
			out[i] = f.ApplyLog(log)
		}
	}
	return out
}

// applyBatch applies logs in one transaction, filling out. It reports false,
// having committed nothing, when a command failed after writing or the
// commit failed, so the batch must be applied entry by entry.
func (f *FSM) applyBatch(logs []*raft.Log, out []any) bool {
	// One allocation for every result: a proposer's future holds its own.
	results := make([]ApplyResult, len(logs))
	var tx *writeTxn
	defer func() {
		if tx != nil {
			tx.abort()
		}
	}()
	for i, log := range logs {
		if log.Type != raft.LogCommand {
			continue
		}
		res := &results[i]
		*res = ApplyResult{Index: log.Index, Type: PeekType(log.Data)}
		out[i] = res
		c, msg, ok := f.decodeEntry(log, res)
		if !ok {
			continue
		}
		if tx == nil {
			st, _ := f.settled() // see ApplyLog
			tx = st.beginWrite()
		}
		tx.index = log.Index
		tx.result = nil
		written := tx.writes
		if err := c.apply(tx, msg); err != nil {
			if tx.writes != written {
				f.logger.Warn("command failed after writing: applying its batch entry by entry",
					"index", log.Index, "command", c.name, "error", err)
				return false
			}
			f.refused(res, c, err)
			continue
		}
		res.Response = tx.result
	}
	if tx == nil {
		return true
	}
	if err := tx.commit(); err != nil {
		f.logger.Warn("committing a batch failed: applying it entry by entry", "error", err)
		return false
	}
	return true
}

// decodeEntry finds and decodes the command in a command entry. When there
// is nothing to apply it returns ok false, with res.Err saying why, or nil
// for an unknown command flagged ignorable.
func (f *FSM) decodeEntry(log *raft.Log, res *ApplyResult) (c command, msg proto.Message, ok bool) {
	if len(log.Data) == 0 {
		res.Err = fmt.Errorf("raft log entry %d: %w", log.Index, ErrEmptyCommand)
		f.logger.Error("cannot apply command", "index", log.Index, "error", res.Err)
		return command{}, nil, false
	}
	c, ok = f.schema.commands[res.Type]
	if !ok {
		if res.Type.Ignorable() {
			f.logger.Warn("skipping unknown command flagged ignorable", "type", uint8(res.Type), "index", log.Index)
			return command{}, nil, false
		}
		res.Err = fmt.Errorf("raft log entry %d: %w", log.Index, unknownCommandError(res.Type))
		if res.Type != 0 {
			// Type 0 is never proposed; anything else came from a newer server.
			res.Err = fmt.Errorf("%w (proposed by a newer server: upgrade this one)", res.Err)
		}
		f.logger.Error("cannot apply command", "index", log.Index, "error", res.Err)
		return command{}, nil, false
	}
	msg, err := c.decode(log.Data[1:])
	if err != nil {
		res.Err = fmt.Errorf("raft log entry %d: %w: %s: %w", log.Index, ErrMalformedCommand, c.name, err)
		f.logger.Error("cannot apply command", "index", log.Index, "error", res.Err)
		return command{}, nil, false
	}
	return c, msg, true
}

// refused records why a decoded command was not applied.
func (f *FSM) refused(res *ApplyResult, c command, err error) {
	res.Err = fmt.Errorf("%s at index %d: %w", c.name, res.Index, err)
	f.logger.Debug("command refused", "index", res.Index, "error", res.Err)
}

// Snapshot captures the current state for raft to persist. It is cheap: it
// pins an immutable version of the tables, and Persist streams it while
// Apply carries on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	st, err := f.settled()
	if err != nil {
		// Never a snapshot pairing raft's installed index with the
		// replaced store's rows.
		return nil, fmt.Errorf("snapshot: the restore raft installed did not decode: %w", err)
	}
	return &fsmSnapshot{state: st.Snapshot()}, nil
}

// Restore replaces the whole state with the snapshot read from rc and closes
// rc. The snapshot is read into a new store which is swapped in only when it
// has been read completely, so on any error (ErrSnapshotVersion,
// ErrSnapshotCorrupt, a read error) the current state is left as it was.
// Blocking queries on the replaced store are woken through its AbandonCh.
//
// Raft calls it for the server's own snapshot at start-up and for one
// another server sends (InstallSnapshot): plugin rows whose facts their
// instances and allocations do not make — a bug of an apply, in every
// snapshot since — are logged at Error and rebuilt from those rows (the
// same on every server), not refused, so such a bug cannot keep every
// restarted server from starting. RestoreStrict refuses them.
//
// A stream that is the snapshot offered by OfferRestore is not read again:
// the store checked from it is swapped in.
func (f *FSM) Restore(rc io.ReadCloser) error {
	return f.restore(rc, false)
}

// RestoreStrict is Restore refusing (ErrSnapshotCorrupt) a snapshot whose
// plugin rows break what the applies keep true of them, not rebuilding
// them: for a snapshot from outside the cluster (operator snapshot
// restore), checked before raft is given it.
func (f *FSM) RestoreStrict(rc io.ReadCloser) error {
	return f.restore(rc, true)
}

func (f *FSM) restore(rc io.ReadCloser, strict bool) error {
	defer rc.Close()
	// A deferred restore still decoding is swapped in before this one (one
	// that failed is replaced by it).
	_ = f.waitRestored()
	// Taken before the offer is: a restore that was offered a checked
	// store is the leader's of an operator's upload, whose caller reads
	// the restored state as soon as raft returns, so it is never deferred.
	f.offered.mu.Lock()
	wasOffered := f.offered.c != nil
	f.offered.mu.Unlock()
	restored, r, done, err := f.offeredStore(rc)
	defer done()
	decoded := restored == nil
	if err == nil && decoded && !strict && !wasOffered && f.deferring.Load() {
		var deferred bool
		if deferred, r, err = f.restoreDeferred(r); err == nil && deferred {
			return nil
		}
	}
	if err == nil && decoded {
		restored, err = f.readSnapshot(r, strict)
	}
	if err != nil {
		f.logger.Error("snapshot restore failed, keeping current state", "error", err)
		return err
	}
	f.swapIn(restored, "checked_before", !decoded)
	// A deferred restore that failed is behind this one now.
	f.pending.Store(nil)
	return nil
}

// swapIn makes restored the state, waking the replaced store's queries,
// and logs it (with flag if set).
func (f *FSM) swapIn(restored *StateStore, flag string, set bool) {
	old := f.state.Swap(restored)
	old.abandon(restored)
	latest, _ := restored.LatestIndex()
	args := []any{"latest_index", latest}
	if set {
		args = append(args, flag, true)
	}
	f.logger.Info("restored state from snapshot", args...)
}
