// Package fsm is berth's replicated state machine: the raft commands, the
// functions that apply them, the state store they change, and the snapshot
// format that carries the whole state between servers.
//
// # Commands
//
// A raft log entry is one byte of MessageType followed by the protobuf
// encoding of that command's message (rpc/proto/berth/v1/commands.proto),
// decoded with proto.Unmarshal and nothing else: a second decoder that
// accepted bytes the real one refuses could store a row no server can read
// back. Proposers build entries with Encode and turn raft's future into the
// applied index or the command's error with ResultOf:
//
//	buf, err := fsm.Encode(fsm.NodeStatusUpdate, &pb.NodeStatusUpdateCommand{
//		NodeId: id, Status: pb.NodeStatus_NODE_STATUS_DOWN, UpdatedAt: now.UnixNano(),
//	})
//	...
//	index, err := fsm.ResultOf(ctx, r.Apply(buf, timeout))
//	if errors.Is(err, fsm.ErrNodeNotFound) { ... }
//
// Command numbers are append-only. A server too old to know a type skips
// it when it has IgnoreUnknownFlag set and fails the entry with
// ErrUnknownCommand otherwise. FSM implements raft.BatchingFSM and applies
// a batch of entries in one transaction, so an apply function checks
// everything that can refuse its command before it writes: a refused
// command may share the batch only because it wrote nothing (one that
// fails after writing makes the batch redo itself entry by entry).
//
// Apply is deterministic: no I/O, no clock, no randomness (make check
// enforces it); times and IDs travel inside commands. It never panics. A
// server that wants a latency metric per command wraps the FSM and times
// ApplyLog, labelling with the result's Type.
//
// # State store
//
// StateStore holds the tables in go-memdb. A table is declared once, in
// state_schema.go, with newTable: its rows are protobuf messages of one
// type, its primary key one or more string fields, and it may have
// secondary indexes over one or more string fields, unique or not. Rows are
// shared by every reader and never mutated: an update stores a changed
// proto.Clone. Every row carries the raft index that created it and the
// one that last changed it; the index table holds each table's last change.
//
// Reads are typed helpers on a table and its indexes (first, list by all
// key parts or a prefix, page from a lower bound), taking an optional
// memdb.WatchSet; BlockingQuery re-runs one on a fresh StateSnapshot until
// its index passes the caller's. Apply functions read through the same
// helpers with their writeTxn, which reads the batch's write transaction:
// every index sees every row written earlier in the batch.
//
// # Snapshots
//
// A snapshot is a versioned header, one record per row naming its table, an
// index record per table and an end record counting the records (see
// SnapshotVersion). Restore builds a new store and swaps it in only when
// the stream was complete and valid, so a refused snapshot leaves the
// state untouched; the replaced store's AbandonCh closes, which moves
// blocking queries to the new one.
//
// The table rule. Tables are added without a new snapshot version: Restore
// skips, and logs, the rows and index record of a table it does not know.
// That is safe only if the skipped rows are rows this server could never
// have written itself: rows only commands it fails as unknown write. Three
// rules keep that true, and every new table and command must follow them:
//
//   - Table names, like command numbers, are never reused: a name means one
//     table holding one message type, for good.
//   - A new table is written only by new commands, never by a command an
//     older server already applies (that server would apply it without the
//     table's rows and diverge).
//   - A command that writes a new table is not proposed until every server
//     runs a version that knows it, and none older joins after. The
//     proposer checks: each server records its berth version in the
//     servers table (ServerMember.version, re-recorded when it starts),
//     and the proposer compares the version of every server in raft's
//     configuration with the one that introduced the command, refusing
//     with FailedPrecondition while any is older or not yet recorded.
//
// A snapshot from a newer cluster restored by older servers (an operator's
// downgrade) loses the tables they do not know; the log line names them.
// Everything else in a snapshot is strict and refused as ErrSnapshotCorrupt.
//
// # Adding a table and a command
//
// Claims as the example: keyed by volume and alloc, listed by node.
//
// Messages, in rpc/proto/berth/v1/, then make proto: the object (message
// Claim { string volume_id = 1; string alloc_id = 2; string node_id = 3;
// ... uint64 create_index; uint64 modify_index; }) and the command
// (message ClaimReserveCommand { Claim claim = 1; }).
//
// Command number: the next free MessageType in command.go, with
// IgnoreUnknownFlag only if an older server may safely skip the command.
// Keep the table rule above.
//
// Table, in state_schema.go, named by a TableClaims constant and added to
// productionSchema's list:
//
//	claimsTable  = newTable(TableClaims, (*pb.Claim).GetVolumeId, (*pb.Claim).GetAllocId)
//	claimsByNode = claimsTable.index("node", (*pb.Claim).GetNodeId, (*pb.Claim).GetVolumeId)
//
// claimsTable.list(r, ws, volume) lists a volume's claims (a prefix of the
// primary key), claimsByNode.list(r, ws, node, volume) a node's claims on a
// volume, of which there may be several. uniqueIndex declares a key no two
// rows may share; insert and Restore enforce it.
//
// Reads, in state_claims.go, for everyone else:
//
//	func (r reader) ClaimsByNode(ws memdb.WatchSet, node string) ([]*pb.Claim, error) {
//		return claimsByNode.list(r, ws, node)
//	}
//
// Apply function, in apply_claim.go: validate; read what the command
// depends on through tx (it sees the claims written earlier in the batch);
// refuse with a sentinel from errors.go naming volume, alloc and node,
// before writing; then set the create and modify indexes from tx.index and
// claimsTable.insert(tx, claim). Register it in command.go's commands table:
//
//	ClaimReserve: newCommand("ClaimReserve", applyClaimReserve),
//
// Tests: a script in testdata/ (the command in script_test.go's harness),
// the command in everyCommand (command_test.go) for FuzzDecode, and a batch
// test like TestBatchIndexReadRefusesSecondWriter for every refusal that
// reads an index. Snapshots, restore and blocking queries pick the table up
// from the schema.
package fsm
