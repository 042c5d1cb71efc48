// Package fsm is berth's replicated state machine: the raft commands, the
// functions that apply them, the state store they change, and the snapshot
// format that carries the whole state between servers.
//
// # Commands
//
// A raft log entry is one byte of MessageType followed by the protobuf
// encoding of that command's message (see rpc/proto/berth/v1/commands.proto).
// Proposers build entries with Encode and hand them to raft.Apply; ResultOf
// turns the returned future into the applied index or the command's error:
//
//	buf, err := fsm.Encode(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
//		NodeId: id, Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: now.UnixNano(),
//	})
//	...
//	index, err := fsm.ResultOf(ctx, r.Apply(buf, timeout))
//	if errors.Is(err, fsm.ErrNodeNotFound) { ... }
//
// Command numbers are append-only. Types with IgnoreUnknownFlag set may be
// skipped by a server too old to know them; any other unknown type fails the
// entry with ErrUnknownCommand. Each command has one apply function,
// registered in the dispatch table in command.go. An apply function checks
// everything that can refuse the command before it writes: FSM implements
// raft.BatchingFSM and applies a batch of entries in one transaction, which
// a refused command may share only because it wrote nothing (a command that
// fails after writing makes the batch redo itself entry by entry).
//
// # Determinism
//
// Apply must produce the same state on every server, so this package does no
// I/O and reads no clock and no randomness (make check enforces it). Times
// and IDs travel inside commands, set by whoever proposes them. A command
// that cannot be applied changes nothing and reports why in its ApplyResult;
// Apply never panics.
//
// The package does not time commands itself. A server that wants a latency
// metric per command wraps the FSM and calls ApplyLog, labelling with the
// result's Type (or PeekType of the entry):
//
//	func (t timedFSM) Apply(l *raft.Log) any {
//		start := t.clock.Now()
//		res := t.FSM.ApplyLog(l)
//		t.observe(res.Type.String(), t.clock.Since(start))
//		return res
//	}
//
// # State store
//
// StateStore holds the tables (nodes and servers now; jobs, allocations,
// volumes, claims, attachments, plugins and evaluations as they arrive, each
// registered in state_schema.go) in go-memdb. Every object carries the raft
// index that created it and the one that last changed it, and the index
// table records the raft index of each table's last change. A table keeps
// each object as its protobuf encoding (see row) and decodes it on first
// read; reads hand out that decoded message, shared with every other reader,
// so callers must not mutate it. Updates never mutate a stored object; they
// store a new row. The hot commands read their bodies at the wire level (see
// checkWire) and store bytes without building a message.
//
// Reads take an optional memdb.WatchSet. BlockingQuery builds the long-poll
// behind the HTTP API's ?index= parameter from them: it re-runs a read on a
// fresh point-in-time StateSnapshot each time what it read changes, until
// the read's index passes the caller's.
//
// # Snapshots
//
// Snapshot pins an immutable version of the tables; raft persists it as a
// versioned header followed by every row and table index (see
// SnapshotVersion). Restore reads a snapshot into a new store and swaps it in
// only when complete, so a newer-version or corrupt snapshot leaves the
// current state untouched. The replaced store's AbandonCh closes, which
// wakes blocking queries so they move on to the new store.
package fsm
