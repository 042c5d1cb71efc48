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
// Every command is decoded with proto.Unmarshal, and only with it: a second
// decoder that accepted bytes the real one refuses could store a row no
// server can read back.
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
// volumes, claims, attachments, plugins and evaluations as they arrive) in
// go-memdb. A table is declared once in state_schema.go with newTable: its
// rows are protobuf messages of one type, its primary key is one or more
// string fields of the message, and it may have secondary indexes, each
// over one or more string fields, unique or not. Rows are the messages
// themselves, shared by every reader, so nobody may mutate a message once
// it is stored: an update stores a new message (a proto.Clone, changed).
// Every object carries the raft index that created it and the one that last
// changed it, and the index table records the raft index of each table's
// last change.
//
// Reads are typed helpers on the table (first by primary key, list by the
// whole key or a prefix of its parts, a page from a lower bound) and on its
// indexes (first, list by all parts or a prefix). They take an optional
// memdb.WatchSet. BlockingQuery builds the long-poll behind the HTTP API's
// ?index= parameter from them: it re-runs a read on a fresh point-in-time
// StateSnapshot each time what it read changes, until the read's index
// passes the caller's.
//
// Apply functions read through the same helpers, passing their writeTxn:
// it reads through the batch's go-memdb write transaction, so every index
// sees every row written earlier in the same raft batch. "Is this volume
// already claimed for writing?" asked through an index is answered with the
// claim the previous command of the batch wrote.
//
// # Snapshots
//
// Snapshot pins an immutable version of the tables; raft persists it as a
// versioned header, one record per row naming its table, one index record
// per table, and an end record counting the records (see SnapshotVersion).
// Restore reads a snapshot into a new store and swaps it in only when
// complete, so a newer-version, cut off or corrupt snapshot leaves the
// current state untouched. The replaced store's AbandonCh closes, which
// wakes blocking queries so they move on to the new store.
//
// Tables are added without a new snapshot version. The rule: Restore skips
// the rows and index records of a table it does not know, and logs how many
// it skipped. A table unknown to this server only ever gets rows through
// commands this server cannot apply either (it fails them as unknown), so
// skipping it leaves the server exactly as current as it can be. Everything
// else is strict: a row of a known table that does not decode, rows out of
// key order, a missing end record or a wrong count refuse the whole
// snapshot with ErrSnapshotCorrupt.
//
// # Adding a table and a command
//
// Claims are the example: a table keyed by volume and alloc, with indexes by
// volume and by node, and a command that reserves a claim.
//
//  1. Messages: the object (message Claim { string volume_id = 1; string
//     alloc_id = 2; string node_id = 3; ... uint64 create_index; uint64
//     modify_index; }) and the command (message ClaimCommand { Claim
//     claim = 1; }) in rpc/proto/berth/v1/, then make proto.
//
//  2. Command number: a new MessageType constant in command.go, the next
//     free number, with IgnoreUnknownFlag only if an older server may
//     safely skip it (its loss cannot make that server's state wrong).
//
//  3. Table, in state_schema.go, and in productionSchema's list:
//
//     claimsTable        = newTable(TableClaims, (*pb.Claim).GetVolumeId, (*pb.Claim).GetAllocId)
//     claimsByNode       = claimsTable.index("node", (*pb.Claim).GetNodeId)
//     claimsByNodeVolume = claimsTable.uniqueIndex("node_volume", (*pb.Claim).GetNodeId, (*pb.Claim).GetVolumeId)
//
//     with a TableClaims name constant. A prefix of the primary key is a
//     lookup too: claimsTable.list(r, ws, volumeID) lists a volume's claims.
//
//  4. Reads for everyone else, in state_claims.go: reader methods over the
//     table's helpers, such as
//     func (r reader) ClaimsByNode(ws memdb.WatchSet, node string) ([]*pb.Claim, error)
//     { return claimsByNode.list(r, ws, node) }.
//
//  5. The apply function, in apply_claim.go: validate the command, read
//     what it depends on through tx (claimsTable.list(tx, nil, volume)
//     sees the claims written earlier in the batch), refuse with a
//     sentinel from errors.go, naming the volume, alloc and node, before
//     writing anything; then set create/modify indexes from tx.index and
//     claimsTable.insert(tx, claim). To change a stored row, insert a
//     proto.Clone of it.
//
//  6. Dispatch: one line in the commands table in command.go,
//     ClaimReserve: newCommand("ClaimReserve", applyClaimReserve).
//
//  7. Tests: a script in testdata/ (a claim-reserve command in
//     script_test.go's harness, with the state printed after each step),
//     the command in everyCommand (command_test.go) so FuzzDecode covers
//     it, and a batch test like TestBatchIndexReadRefusesSecondWriter for
//     every refusal that reads an index.
//
// Snapshots, restore and blocking queries pick the table up from the
// schema; older servers skip its snapshot records (see Snapshots).
package fsm
