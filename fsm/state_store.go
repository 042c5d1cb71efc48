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
// queries sleep until what they read changes. Tables keep each object as its
// encoding (see row) and decode it on first read.
//
// Only the FSM writes to it, from raft's apply goroutine. Reads are safe from
// any goroutine. Objects returned by reads are shared with the store and
// with other readers: callers must not mutate them (proto.Clone first). The
// store never mutates an object it has handed out; updates store a new row.
//
// Restore replaces a StateStore as a whole: the FSM builds a new one and
// abandons the old, closing AbandonCh. An abandoned store still answers reads
// with the state it had; BlockingQuery moves on to the replacement.
type StateStore struct {
	reader
	abandonCh chan struct{}
	// next is the store that replaced this one, set before abandonCh closes.
	next atomic.Pointer[StateStore]
}

// StateSnapshot is a point-in-time view of a StateStore: every read on it
// sees the state as of the moment it was taken, however many commands are
// applied meanwhile. Taking one is cheap (the tables are immutable trees).
type StateSnapshot struct {
	reader
}

// reader holds the read methods shared by StateStore and StateSnapshot.
type reader struct {
	db *memdb.MemDB
}

func newStateStore() *StateStore {
	db, err := memdb.NewMemDB(schema())
	if err != nil {
		// The schema is a compile-time constant; an error here is a bug that
		// every test catches, not a runtime condition to handle.
		panic(fmt.Sprintf("fsm: invalid state store schema: %v", err))
	}
	return &StateStore{reader: reader{db: db}, abandonCh: make(chan struct{})}
}

// Snapshot returns a point-in-time view of the store for consistent reads
// across several tables.
func (s *StateStore) Snapshot() *StateSnapshot {
	return &StateSnapshot{reader: reader{db: s.db.Snapshot()}}
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
	if _, ok := tableNamed(table); !ok {
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
	it, err := r.db.Txn(false).Get(tableIndex, indexID)
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

// firstRow looks up one row of a data table by primary key, adding a watch
// on it to ws. It returns nil when there is no such row.
func firstRow(txn *memdb.Txn, ws memdb.WatchSet, table string, id string) (*row, error) {
	watchCh, obj, err := txn.FirstWatch(table, indexID, id)
	if err != nil {
		return nil, fmt.Errorf("reading %s %q: %w", table, id, err)
	}
	ws.Add(watchCh)
	if obj == nil {
		return nil, nil
	}
	r, ok := obj.(*row)
	if !ok {
		return nil, fmt.Errorf("table %s holds a %T", table, obj)
	}
	return r, nil
}

// first looks up one object by primary key, adding a watch on it to ws. It
// returns the zero M (a nil pointer) when there is no such row.
func first[M proto.Message](txn *memdb.Txn, ws memdb.WatchSet, table string, id string) (M, error) {
	var zero M
	r, err := firstRow(txn, ws, table, id)
	if err != nil || r == nil {
		return zero, err
	}
	m, err := rowMessage[M](r)
	if err != nil {
		return zero, fmt.Errorf("reading %s: %w", table, err)
	}
	return m, nil
}

// list returns every object of table in primary-key order, adding a watch
// on the whole table to ws.
func list[M proto.Message](txn *memdb.Txn, ws memdb.WatchSet, table string) ([]M, error) {
	var out []M
	err := eachRow(txn, ws, table, func(r *row) error {
		m, err := rowMessage[M](r)
		if err != nil {
			return fmt.Errorf("listing %s: %w", table, err)
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

// eachRow calls fn with every row of table in primary-key order, adding a
// watch on the whole table to ws, and stops at fn's first error.
func eachRow(txn *memdb.Txn, ws memdb.WatchSet, table string, fn func(*row) error) error {
	it, err := txn.Get(table, indexID)
	if err != nil {
		return fmt.Errorf("listing %s: %w", table, err)
	}
	ws.Add(it.WatchCh())
	for obj := it.Next(); obj != nil; obj = it.Next() {
		r, ok := obj.(*row)
		if !ok {
			return fmt.Errorf("table %s holds a %T", table, obj)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// writeTxn is the write transaction one command, or a batch of commands,
// applies in. Apply functions read through row and write only through
// insert, delete and touch, which count the writes: a batch relies on that
// count to tell a refused command that wrote nothing (the batch carries on)
// from one that failed half-way (the batch is redone command by command).
type writeTxn struct {
	txn *memdb.Txn
	// base reads the state as it was when the transaction began, and
	// written holds every row the transaction has stored (or deleted: nil)
	// since; row reads through both. Reading through txn itself would be
	// as correct, but a read on a memdb write transaction makes the radix
	// tree forget which of its nodes the transaction already copied, so
	// each later insert of the batch would copy its whole path again.
	base    *memdb.Txn
	written map[rowRef]*row
	// index is the raft index of the command being applied.
	index uint64
	// writes counts rows inserted or deleted and tables touched.
	writes int
	// touched holds each table changed in this transaction with the index
	// of the command that last changed it. commit writes them to the index
	// table, so a batch writes each table's index once, not once a command.
	touched []tableTouch
}

// rowRef names a row: its table and key.
type rowRef struct{ table, key string }

type tableTouch struct {
	table string
	index uint64
}

// beginWrite starts a write transaction for up to commands commands, which
// sizes the record of written rows for a batch.
func (s *StateStore) beginWrite(commands int) *writeTxn {
	return &writeTxn{
		txn:     s.db.Txn(true),
		base:    s.db.Txn(false),
		written: make(map[rowRef]*row, commands),
	}
}

// row returns the row of table with key as this transaction sees it, nil
// when there is none.
func (tx *writeTxn) row(table, key string) (*row, error) {
	if r, ok := tx.written[rowRef{table, key}]; ok {
		return r, nil
	}
	return firstRow(tx.base, nil, table, key)
}

// maxRowBytes bounds one row: a snapshot carries each row in one record,
// and Restore refuses records over maxSnapshotRecord, so a larger row would
// make a snapshot no server can restore. The margin is the record's framing.
const maxRowBytes = maxSnapshotRecord - 64

// insert stores r in table, replacing the row with the same key. A row over
// maxRowBytes is refused before anything is written.
func (tx *writeTxn) insert(table string, r *row) error {
	if len(r.raw) > maxRowBytes {
		return fmt.Errorf("%w: %s row %q is %d bytes, over the limit of %d", ErrInvalidCommand, table, r.key, len(r.raw), maxRowBytes)
	}
	tx.writes++
	if err := tx.txn.Insert(table, r); err != nil {
		return err
	}
	tx.remember(table, r.key, r)
	return nil
}

// delete removes r, which must be the stored row, from table.
func (tx *writeTxn) delete(table string, r *row) error {
	tx.writes++
	if err := tx.txn.Delete(table, r); err != nil {
		return err
	}
	tx.remember(table, r.key, nil)
	return nil
}

func (tx *writeTxn) remember(table, key string, r *row) {
	tx.written[rowRef{table, key}] = r
}

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
