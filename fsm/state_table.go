package fsm

import (
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"
)

// txnSource is what table reads run on: a reader (StateStore or
// StateSnapshot), which reads the committed state, or the writeTxn of the
// command being applied, which also sees every row written earlier in its
// transaction (its raft batch), through every index.
type txnSource interface {
	readTxn() memdbReader
}

// memdbReader is the read half of a *memdb.Txn. Reads get only this, so
// that a read helper handed the batch's write transaction cannot write
// through it: every write must go through table.insert, table.delete or
// touch, which count it (see writeTxn).
type memdbReader interface {
	First(table, index string, args ...any) (any, error)
	FirstWatch(table, index string, args ...any) (<-chan struct{}, any, error)
	Get(table, index string, args ...any) (memdb.ResultIterator, error)
	LowerBound(table, index string, args ...any) (memdb.ResultIterator, error)
}

var _ memdbReader = (*memdb.Txn)(nil)

// first returns the row whose primary key is key (every part), or the zero
// M (a nil pointer) when there is none, adding a watch on that key to ws
// (which may be nil).
func (t *table[M]) first(src txnSource, ws memdb.WatchSet, key ...string) (M, error) {
	return t.primary.first(src, ws, key...)
}

// list returns, in primary-key order, every row whose primary key starts
// with the parts given (all of them, a prefix, or none for the whole
// table), adding a watch on that range to ws.
func (t *table[M]) list(src txnSource, ws memdb.WatchSet, prefix ...string) ([]M, error) {
	return t.primary.list(src, ws, prefix...)
}

// first returns the first row, in this index's order, whose key is parts
// (every part), or the zero M when there is none, adding a watch to ws.
// On a unique index that is the one row with that key.
func (x *index[M]) first(src txnSource, ws memdb.WatchSet, parts ...string) (M, error) {
	var zero M
	if tx, ok := src.(*writeTxn); ok && ws == nil && x == x.table.primary && len(parts) == len(x.key.parts) {
		// A read by whole primary key in an apply: see writeTxn.written.
		obj, err := tx.firstByKey(x.table.name, parts)
		if err != nil {
			return zero, fmt.Errorf("reading %s %q: %w", x.table.name, parts, err)
		}
		if obj == nil {
			return zero, nil
		}
		return x.table.row(obj)
	}
	watchCh, obj, err := src.readTxn().FirstWatch(x.table.name, x.name, stringArgs(parts)...)
	if err != nil {
		return zero, fmt.Errorf("reading %s by %s %q: %w", x.table.name, x.name, parts, err)
	}
	ws.Add(watchCh)
	if obj == nil {
		return zero, nil
	}
	return x.table.row(obj)
}

// encodeKey is a key's parts encoded as the index stores them (keyIndex).
func encodeKey(parts []string) string {
	var buf [64]byte
	key := buf[:0]
	for _, p := range parts {
		key = appendKeyPart(key, p)
	}
	return string(key)
}

// list returns every row whose key in this index starts with the parts
// given (all of them, a prefix, or none), in index order, adding a watch on
// that range to ws.
func (x *index[M]) list(src txnSource, ws memdb.WatchSet, parts ...string) ([]M, error) {
	var out []M
	err := x.each(src.readTxn(), ws, parts, func(m M) error {
		out = append(out, m)
		return nil
	})
	return out, err
}

// each calls fn with every row whose key in this index starts with parts,
// in index order, adding a watch on that range to ws, and stops at fn's
// first error.
func (x *index[M]) each(txn memdbReader, ws memdb.WatchSet, parts []string, fn func(M) error) error {
	it, err := txn.Get(x.table.name, x.name+"_prefix", stringArgs(parts)...)
	if err != nil {
		return fmt.Errorf("listing %s by %s %q: %w", x.table.name, x.name, parts, err)
	}
	ws.Add(it.WatchCh())
	for obj := it.Next(); obj != nil; obj = it.Next() {
		m, err := x.table.row(obj)
		if err != nil {
			return err
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}

// ascend calls fn with every row whose key in this index is at or after
// the lower bound (the first parts of a key; none: from the start), in
// index order, until fn returns false. It adds a watch on the whole table
// to ws: go-memdb cannot watch a range that starts at a bound.
func (x *index[M]) ascend(src txnSource, ws memdb.WatchSet, lower []string, fn func(M) bool) error {
	txn := src.readTxn()
	if ws != nil {
		all, err := txn.Get(x.table.name, indexID)
		if err != nil {
			return fmt.Errorf("watching %s: %w", x.table.name, err)
		}
		ws.Add(all.WatchCh())
	}
	it, err := txn.LowerBound(x.table.name, x.name+"_prefix", stringArgs(lower)...)
	if err != nil {
		return fmt.Errorf("reading %s by %s from %q: %w", x.table.name, x.name, lower, err)
	}
	for obj := it.Next(); obj != nil; obj = it.Next() {
		m, err := x.table.row(obj)
		if err != nil {
			return err
		}
		if !fn(m) {
			return nil
		}
	}
	return nil
}

// hasRows reports whether t holds any row: one read, however many it
// holds.
func (t *table[M]) hasRows(src txnSource) (bool, error) {
	found := false
	err := t.primary.ascend(src, nil, nil, func(M) bool {
		found = true
		return false
	})
	return found, err
}

// page reads one page of t in primary-key order: from the first row whose
// key is at or after from (the first parts of a key; none: the start), the
// rows keep accepts (every row when keep is nil), at most limit of them
// (no limit when limit <= 0). next is the primary key of the first row
// after the page that keep accepts, nil when there is none, so a caller
// passes it back as from for the next page and never gets an empty one. It
// adds a watch on the whole table to ws.
func (t *table[M]) page(src txnSource, ws memdb.WatchSet, from []string, limit int, keep func(M) bool) (rows []M, next []string, err error) {
	err = t.primary.ascend(src, ws, from, func(m M) bool {
		if keep != nil && !keep(m) {
			return true
		}
		if limit > 0 && len(rows) == limit {
			next = t.keyParts(m)
			return false
		}
		rows = append(rows, m)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	return rows, next, nil
}

// keyParts returns m's primary key, part by part.
func (t *table[M]) keyParts(m M) []string { return t.primary.keyParts(m) }

// keyParts returns m's key in this index, part by part.
func (x *index[M]) keyParts(m M) []string {
	parts := make([]string, len(x.key.parts))
	for i, part := range x.key.parts {
		parts[i] = part(m)
	}
	return parts
}

// row asserts that obj, read from t, is an M.
func (t *table[M]) row(obj any) (M, error) {
	m, ok := obj.(M)
	if !ok {
		return m, fmt.Errorf("table %s holds a %T, want %T", t.name, obj, m)
	}
	return m, nil
}

// stringArgs converts key parts to the arguments memdb takes: one
// *keyArg holding the key already encoded, which keyIndex's FromArgs and
// PrefixFromArgs hand back as it is. Each string part in an interface would
// cost an allocation, the slice another and the key built from them a
// third or more; a lookup was about a tenth of the plan apply's allocations.
// No parts is no arguments, memdb's lookup of every row.
func stringArgs(parts []string) []any {
	if len(parts) == 0 {
		return nil
	}
	k := &keyArg{parts: len(parts)}
	k.key = k.buf[:0]
	for _, p := range parts {
		k.key = appendKeyPart(k.key, p)
	}
	k.args[0] = k // a pointer in an interface: no allocation
	return k.args[:]
}

// keyArg is a lookup key encoded once (see stringArgs), in one allocation
// when it fits buf (one 36-character ID does).
type keyArg struct {
	parts int // how many parts key encodes
	key   []byte
	args  [1]any
	buf   [40]byte
}

// maxRowBytes bounds one row's encoding: a snapshot carries each row in
// one record, and Restore refuses records over maxSnapshotRecord, so a
// larger row would make a snapshot no server can restore. The margin is the
// record's framing and table name.
const maxRowBytes = maxSnapshotRecord - 1024

// insert stores m, replacing the row with its primary key, and marks the
// table changed at the command's index. m is the table's from then on and
// must not be mutated. What the store would refuse (an empty part of the
// primary key, an encoding over maxRowBytes, a key another row holds in a
// unique index) is refused before anything is written, with a sentinel:
// an apply function that forgot to check it fails its command alone, and
// its batch carries on.
func (t *table[M]) insert(tx *writeTxn, m M) error {
	var prev M
	return t.write(tx, m, prev, false)
}

// write is insert; with prevKnown the caller gives the row m replaces as
// the transaction holds it (prev, nil for none), which spares reading it
// again for the derived tables (replace checks it under the tests'
// checkReplacePrev).
func (t *table[M]) write(tx *writeTxn, m, prev M, prevKnown bool) error {
	// The key is read and encoded once for the stored row's lookup and
	// the write: the plan inserts four rows, each keyed twice before.
	parts := t.keyParts(m)
	for i, part := range parts {
		if part == "" {
			return fmt.Errorf("%w: %s row %s: part %d of %d of its primary key is empty",
				ErrInvalidCommand, t.name, t.keyString(m), i+1, len(parts))
		}
	}
	key := encodeKey(parts)
	if size := proto.Size(m); size > maxRowBytes {
		return fmt.Errorf("%w: %s row %s is %d bytes, over the limit of %d", ErrInvalidCommand, t.name, t.keyString(m), size, maxRowBytes)
	}
	if x, other, err := t.uniqueClash(tx.txn, m); err != nil {
		return err
	} else if x != nil {
		return fmt.Errorf("%w: %s row %s has %s %q, as row %s does", ErrDuplicateKey, t.name, t.keyString(m), x.name, x.keyParts(m), t.keyString(other))
	}
	if !prevKnown && t.insertReadsOld() {
		obj, err := tx.firstByEncodedKey(t.name, key, parts)
		if err != nil {
			return fmt.Errorf("reading %s %q: %w", t.name, parts, err)
		}
		if obj != nil {
			if prev, err = t.row(obj); err != nil {
				return err
			}
		}
	}
	if err := tx.insertRow(t.name, key, m); err != nil {
		return fmt.Errorf("storing %s row %s: %w", t.name, t.keyString(m), err)
	}
	tx.touch(t.name)
	for _, d := range t.derived {
		if err := d.changed(tx, prev, m); err != nil {
			return err
		}
	}
	return nil
}

// uniqueClash returns the first unique secondary index in which another
// row of txn holds m's key, and that row; nil when there is none. go-memdb
// does not check unique secondary indexes: it would point the key at m and
// leave the other row unreachable through that index, so insert and
// restoreRow both ask this before they store a row.
func (t *table[M]) uniqueClash(txn memdbReader, m M) (*index[M], M, error) {
	var zero M
	for _, x := range t.secondary {
		if !x.unique {
			continue
		}
		parts := x.keyParts(m)
		if slices.Contains(parts, "") {
			continue // not in the index
		}
		obj, err := txn.First(t.name, x.name, stringArgs(parts)...)
		if err != nil {
			return nil, zero, fmt.Errorf("reading %s by %s %q: %w", t.name, x.name, parts, err)
		}
		if obj == nil {
			continue
		}
		other, err := t.row(obj)
		if err != nil {
			return nil, zero, err
		}
		if !slices.Equal(t.keyParts(other), t.keyParts(m)) {
			return x, other, nil
		}
	}
	return nil, zero, nil
}

// stored returns the row of the transaction with m's primary key, for the
// derived state to count it out; nil, without a read, when t derives
// nothing.
func (t *table[M]) stored(tx *writeTxn, m M) (M, error) {
	var zero M
	if len(t.derived) == 0 {
		return zero, nil
	}
	return t.first(tx, nil, t.keyParts(m)...)
}

// delete removes m, a row read from t, and marks the table changed.
func (t *table[M]) delete(tx *writeTxn, m M) error {
	// What the derived state counted is the stored row, which a caller
	// holding an older copy of it may not have.
	stored, err := t.stored(tx, m)
	if err != nil {
		return err
	}
	if err := tx.deleteRow(t.name, encodeKey(t.keyParts(m)), m); err != nil {
		return fmt.Errorf("deleting %s row %s: %w", t.name, t.keyString(m), err)
	}
	tx.touch(t.name)
	var zero M
	for _, d := range t.derived {
		if err := d.changed(tx, stored, zero); err != nil {
			return err
		}
	}
	return nil
}

// reform stores m, a row whose reads are unchanged (it moved to another
// form: csiReform), without marking the table changed: its index, and
// the blocking queries waiting on it, stay where they were.
func (t *table[M]) reform(tx *writeTxn, m M) error {
	if len(t.derived) > 0 {
		return fmt.Errorf("fsm: table %s derives state: reform would skip it", t.name)
	}
	parts := t.keyParts(m)
	if err := tx.insertRow(t.name, encodeKey(parts), m); err != nil {
		return fmt.Errorf("storing %s row %s: %w", t.name, t.keyString(m), err)
	}
	return nil
}

// deleteOnlyDerived is derived state that an insert or a change does not
// move (volume_room): an insert of the tables it alone derives from does
// not read the row it replaces, and changed gets no old row for it.
type deleteOnlyDerived interface {
	derivesOnDeleteOnly()
}

// insertReadsOld says whether insert reads the row it replaces for a
// derived state's changed.
func (t *table[M]) insertReadsOld() bool {
	for _, d := range t.derived {
		if _, ok := d.(deleteOnlyDerived); !ok {
			return true
		}
	}
	return false
}
