package fsm

import (
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// StateStore is the replicated state: indexed tables of protobuf objects in
// an in-memory database whose reads can register watch channels, so blocking
// queries sleep until what they read changes.
//
// Only the FSM writes to it, from raft's apply goroutine. Reads are safe from
// any goroutine. Objects returned by reads are shared with the store and
// with other readers: callers must not mutate them (proto.Clone first). The
// store never mutates an object it has handed out; updates store a new
// message.
//
// Restore replaces a StateStore as a whole: the FSM builds a new one and
// abandons the old, closing AbandonCh. An abandoned store still answers reads
// with the state it had; BlockingQuery moves on to the replacement.
type StateStore struct {
	reader
	abandonCh chan struct{}
	// next is the store that replaced this one, set before abandonCh closes.
	next atomic.Pointer[StateStore]
	// waiting counts the blocking queries waiting on this store; herd is
	// how many were waiting when it was abandoned, which that woke at once
	// (QueryTurn). turns is the FSM's QueryTurn.
	waiting, herd atomic.Int64
	turns         *queryTurns
}

// StateSnapshot is a point-in-time view of a StateStore: every read on it
// sees the state as of the moment it was taken, however many commands are
// applied meanwhile. Taking one is cheap (the tables are immutable trees).
type StateSnapshot struct {
	reader
}

// reader holds the read methods shared by StateStore and StateSnapshot.
type reader struct {
	db     *memdb.MemDB
	schema schema
}

// readTxn makes reader a txnSource: each read sees the latest committed
// state (a StateSnapshot's db never changes).
func (r reader) readTxn() memdbReader { return r.db.Txn(false) }

func newStateStore(s schema) *StateStore {
	db, err := memdb.NewMemDB(s.memdb())
	if err != nil {
		// The schema is fixed at compile time; an error here is a bug that
		// every test catches, not a runtime condition to handle.
		panic(fmt.Sprintf("fsm: invalid state store schema: %v", err))
	}
	return &StateStore{reader: reader{db: db, schema: s}, abandonCh: make(chan struct{})}
}

// Snapshot returns a point-in-time view of the store for consistent reads
// across several tables.
func (s *StateStore) Snapshot() *StateSnapshot {
	return &StateSnapshot{reader: reader{db: s.db.Snapshot(), schema: s.schema}}
}

// AbandonCh is closed when a snapshot restore replaces this store. Blocking
// readers add it to their watch set so they wake and re-read from the FSM's
// new store.
func (s *StateStore) AbandonCh() <-chan struct{} {
	return s.abandonCh
}

// abandon records the replacement and wakes everyone watching this store.
func (s *StateStore) abandon(next *StateStore) {
	s.next.Store(next)
	s.herd.Store(s.waiting.Load())
	close(s.abandonCh)
}

// latest follows replacements to the store currently in use.
func (s *StateStore) latest() *StateStore {
	for {
		next := s.next.Load()
		if next == nil {
			return s
		}
		s = next
	}
}

// Index returns the raft index of the last change to table, 0 if it never
// changed. It adds no watch: the index table changes with every write, and a
// blocking query must watch only what it read.
func (r reader) Index(table string) (uint64, error) {
	if _, ok := r.schema.table(table); !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownTable, table)
	}
	txn := r.db.Txn(false)
	row, err := txn.First(tableIndex, indexID, table)
	if err != nil {
		return 0, fmt.Errorf("reading index of table %s: %w", table, err)
	}
	if row == nil {
		return 0, nil
	}
	return row.(*pb.TableIndex).GetIndex(), nil
}

// LatestIndex returns the highest raft index that changed any table, 0 for an
// empty store.
func (r reader) LatestIndex() (uint64, error) {
	return r.latestIn(r.db.Txn(false))
}

func (reader) latestIn(txn *memdb.Txn) (uint64, error) {
	it, err := txn.Get(tableIndex, indexID)
	if err != nil {
		return 0, fmt.Errorf("listing table indexes: %w", err)
	}
	var latest uint64
	for obj := it.Next(); obj != nil; obj = it.Next() {
		ti, ok := obj.(*pb.TableIndex)
		if !ok {
			return 0, fmt.Errorf("index table holds a %T", obj)
		}
		latest = max(latest, ti.GetIndex())
	}
	return latest, nil
}

// writeTxn is the write transaction one command, or a batch of commands,
// applies in. Apply functions read through it (it is a txnSource, so every
// table read sees the rows the transaction already wrote, through every
// index) and write only through table.insert, table.delete and touch, which
// count the writes: a batch relies on that count to tell a refused command
// that wrote nothing (the batch carries on) from one that failed half-way
// (the batch is redone command by command).
type writeTxn struct {
	txn *memdb.Txn
	// base reads the state as the transaction found it (the last commit),
	// and written holds every row the transaction has written or deleted,
	// by table and primary key: together they answer a read by a whole
	// primary key (table.first) without reading through txn. A read
	// through txn clones the index it reads, and go-memdb's clone drops
	// the transaction's record of the index nodes it has already copied,
	// so the next insert into that index would copy its whole path again
	// (a plan's reads by ID fell on the very indexes it then writes).
	// Every write goes through insertRow and deleteRow, which keep written
	// in step; reads by anything else (secondary indexes, prefixes) go
	// through txn, which holds the same rows.
	base    *memdb.Txn
	written map[rowKey]writtenRow
	// index is the raft index of the command being applied.
	index uint64
	// writes counts rows inserted or deleted and tables touched.
	writes int
	// result is what the command being applied answers beyond its index
	// (ApplyResult.Response), set by its apply function.
	result proto.Message
	// touched holds each table changed in this transaction with the index
	// of the command that last changed it. commit writes them to the index
	// table, so a batch writes each table's index once, not once a command.
	touched []tableTouch
	// stateSince caches stateSinceOn for this transaction: 0 not yet
	// read, 1 on, -1 off; a write to the servers table resets it.
	stateSince int8
	// instancesSplit caches pluginInstancesOn likewise.
	instancesSplit int8
}

type tableTouch struct {
	table string
	index uint64
}

// rowKey is a row's table and encoded primary key (keyIndex).
type rowKey struct{ table, key string }

// writtenRow is what a transaction last wrote under a rowKey: a row, or
// its deletion.
type writtenRow struct {
	row     proto.Message
	deleted bool
}

// beginWrite starts a write transaction.
func (s *StateStore) beginWrite() *writeTxn {
	return &writeTxn{txn: s.db.Txn(true), base: s.db.Txn(false), written: map[rowKey]writtenRow{}}
}

// insertRow stores row, whose primary key in table is key, counting the
// write. table.insert and the derived state write through it.
func (tx *writeTxn) insertRow(table, key string, row proto.Message) error {
	tx.writes++
	if table == TableServers {
		tx.stateSince, tx.instancesSplit = 0, 0
	}
	if err := tx.txn.Insert(table, row); err != nil {
		return err
	}
	tx.written[rowKey{table, key}] = writtenRow{row: row}
	return nil
}

// deleteRow deletes row, whose primary key in table is key, counting the
// write.
func (tx *writeTxn) deleteRow(table, key string, row proto.Message) error {
	tx.writes++
	if table == TableServers {
		tx.stateSince, tx.instancesSplit = 0, 0
	}
	if err := tx.txn.Delete(table, row); err != nil {
		return err
	}
	tx.written[rowKey{table, key}] = writtenRow{deleted: true}
	return nil
}

// firstByKey returns the row of table whose encoded primary key is key as
// the transaction holds it, nil when there is none, without reading
// through txn (see written).
func (tx *writeTxn) firstByKey(table string, parts []string) (any, error) {
	return tx.firstByEncodedKey(table, encodeKey(parts), parts)
}

// firstByEncodedKey is firstByKey for a caller that has encoded the key
// already (key is encodeKey(parts)).
func (tx *writeTxn) firstByEncodedKey(table, key string, parts []string) (any, error) {
	if w, ok := tx.written[rowKey{table, key}]; ok {
		if w.deleted {
			return nil, nil
		}
		return w.row, nil
	}
	return tx.base.First(table, indexID, stringArgs(parts)...)
}

// readTxn reads through the write transaction itself: go-memdb answers
// every index, primary or not, with the transaction's own writes included.
// It hands out only the read methods, so no read can write past the
// writes counter.
func (tx *writeTxn) readTxn() memdbReader { return tx.txn }

// touch records that table changed at the current command's index.
func (tx *writeTxn) touch(table string) {
	tx.writes++
	for i := range tx.touched {
		if tx.touched[i].table == table {
			tx.touched[i].index = tx.index
			return
		}
	}
	tx.touched = append(tx.touched, tableTouch{table: table, index: tx.index})
}

// latestIndex is LatestIndex as the transaction sees it: the last commit's
// table indexes and the writes of the commands applied in it so far, so a
// command reads the same in a batch as alone.
func (tx *writeTxn) latestIndex() (uint64, error) {
	latest, err := reader{}.latestIn(tx.base)
	if err != nil {
		return 0, err
	}
	for _, t := range tx.touched {
		latest = max(latest, t.index)
	}
	return latest, nil
}

// commit writes the index of every touched table and commits, waking the
// watchers of what changed. On error nothing is committed; the caller must
// still abort.
func (tx *writeTxn) commit() error {
	for _, t := range tx.touched {
		if err := tx.txn.Insert(tableIndex, &pb.TableIndex{Table: t.table, Index: t.index}); err != nil {
			return fmt.Errorf("updating index of table %s: %w", t.table, err)
		}
	}
	tx.txn.Commit()
	return nil
}

// abort discards whatever was not committed; after commit it does nothing.
func (tx *writeTxn) abort() {
	tx.txn.Abort()
}
