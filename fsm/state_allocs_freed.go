package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// TableAllocsFreed is derived from the allocs table like node_usage: one
// pb.TableIndex (its table field "allocs") whose index is the latest raft
// index at which an alloc freed capacity or was changed by the servers
// (AllocFreedIndex). Never in a snapshot, never in the index table,
// rebuilt on restore.
const TableAllocsFreed = "allocs_freed"

var allocsFreedTable = newTable(TableAllocsFreed, (*pb.TableIndex).GetTable)

// allocsFreedKey is the one row's key.
const allocsFreedKey = TableAllocs

// AllocsFreedIndex returns the latest index at which an alloc freed or
// changed capacity: an alloc written terminal (its modify index) or
// changed by the servers (its alloc modify index: placed, stopped, moved,
// updated in place). A client update that leaves an alloc running does not
// move it, nor does one of an alloc that was terminal already (a
// server-stopped alloc's tasks being killed, its volumes torn down, its
// end reported): the scheduler stopped counting the alloc when it became
// terminal, so nothing is freed again. It adds a watch on the value to ws, which fires only when it
// moves: the blocked-evaluation feed reads this instead of every alloc.
//
// It is a high-water mark: it is the maximum over every alloc written
// since the store started, or, after a restore, over the allocs the
// snapshot held; a deleted alloc (GC) does not lower it. Only the local
// leader's feed reads it, and a new leader wakes every blocked
// evaluation once whatever it says, so servers need not agree on it.
func (r reader) AllocsFreedIndex(ws memdb.WatchSet) (uint64, error) {
	row, err := allocsFreedTable.first(r, ws, allocsFreedKey)
	if err != nil {
		return 0, err
	}
	return row.GetIndex(), nil
}

// allocFreedIndex is what a counts toward AllocsFreedIndex.
func allocFreedIndex(a *pb.Allocation) uint64 {
	if rules.AllocTerminal(a) {
		return a.GetModifyIndex()
	}
	return a.GetAllocModifyIndex()
}

// allocsFreed keeps allocs_freed from the allocs table.
type allocsFreed struct{}

var _ derived[*pb.Allocation] = allocsFreed{}

func (allocsFreed) schema() *memdb.TableSchema { return allocsFreedTable.memdbSchema() }

func (allocsFreed) changed(tx *writeTxn, old, new *pb.Allocation) error {
	if new == nil {
		return nil // a delete frees nothing the mark has not counted
	}
	v := allocFreedIndex(new)
	if old != nil && rules.AllocTerminal(old) && rules.AllocTerminal(new) {
		// Terminal before this write: it freed what it held when it
		// became so. Only a change by the servers counts now; a client's
		// reports of a stopped alloc's teardown (each a write of the row)
		// otherwise woke every blocked evaluation once per report, and
		// each woken one is a scheduler run and a plan in raft that
		// blocks again (a volume move's stop path made ~6 of them).
		v = new.GetAllocModifyIndex()
	}
	if v == 0 {
		return nil
	}
	row, err := allocsFreedTable.first(tx, nil, allocsFreedKey)
	if err != nil {
		return err
	}
	if v <= row.GetIndex() {
		// A client update of a running alloc, and every alloc after the
		// first of a plan at one index: no write.
		return nil
	}
	if err := tx.insertRow(TableAllocsFreed, encodeKey([]string{allocsFreedKey}), &pb.TableIndex{Table: allocsFreedKey, Index: v}); err != nil {
		return fmt.Errorf("storing %s: %w", TableAllocsFreed, err)
	}
	return nil
}

func (allocsFreed) rebuild(txn *memdb.Txn, src *table[*pb.Allocation]) error {
	var freed uint64
	err := src.primary.each(txn, nil, nil, func(a *pb.Allocation) error {
		freed = max(freed, allocFreedIndex(a))
		return nil
	})
	if err != nil || freed == 0 {
		return err
	}
	if err := txn.Insert(TableAllocsFreed, &pb.TableIndex{Table: allocsFreedKey, Index: freed}); err != nil {
		return fmt.Errorf("storing %s: %w", TableAllocsFreed, err)
	}
	return nil
}
