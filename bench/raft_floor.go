package main

import (
	"fmt"
	"strconv"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
)

// floorKind is the go-memdb floor: an FSM that does the least any FSM
// keeping its state in go-memdb does for a command that stores one row. Per
// raft batch it opens one write transaction, inserts every entry's bytes as
// a row under a fresh UUID-shaped key (the shape of berth's node keys, with
// berth's reflection-free key index), and commits. It checks nothing, looks
// nothing up, decodes nothing and keeps no table index.
//
// It is not an FSM anyone would run. It is measured beside berth so that
// the report shows how much of berth's cost is the store the project chose
// (go-memdb's copy-on-write radix tree, its watch channels and the garbage
// they make) rather than berth's own code.
var floorKind = fsmKind{
	name:   "memdb floor",
	newFSM: func(hclog.Logger) raft.FSM { return newFloorFSM() },
	check: func(resp any) error {
		if resp != nil {
			return fmt.Errorf("memdb floor FSM answered %T, want nil", resp)
		}
		return nil
	},
}

// floorRow is a row of the floor FSM's one table.
type floorRow struct {
	key []byte // NUL-terminated, as the index stores it
	raw []byte
}

// floorKeyIndex indexes floorRows by key without reflection, as berth's
// keyIndex does.
type floorKeyIndex struct{}

func (floorKeyIndex) FromObject(obj any) (bool, []byte, error) {
	r, ok := obj.(*floorRow)
	if !ok {
		return false, nil, fmt.Errorf("row is a %T, want *floorRow", obj)
	}
	return true, r.key, nil
}

func (floorKeyIndex) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("want one argument, got %d", len(args))
	}
	k, ok := args[0].([]byte)
	if !ok {
		return nil, fmt.Errorf("argument is a %T, want []byte", args[0])
	}
	return k, nil
}

// floorFSM is the go-memdb floor (see floorKind).
type floorFSM struct {
	noopFSM
	db *memdb.MemDB
}

var _ raft.BatchingFSM = (*floorFSM)(nil)

func newFloorFSM() *floorFSM {
	db, err := memdb.NewMemDB(&memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		"rows": {Name: "rows", Indexes: map[string]*memdb.IndexSchema{
			"id": {Name: "id", Unique: true, Indexer: floorKeyIndex{}},
		}},
	}})
	if err != nil {
		// A constant schema: an error is a bug every run shows.
		panic(fmt.Sprintf("bench: memdb floor schema: %v", err))
	}
	return &floorFSM{db: db}
}

// Apply applies one entry in its own transaction.
func (f *floorFSM) Apply(l *raft.Log) any {
	f.ApplyBatch([]*raft.Log{l})
	return nil
}

// ApplyBatch inserts the batch's command entries in one transaction.
func (f *floorFSM) ApplyBatch(logs []*raft.Log) []any {
	txn := f.db.Txn(true)
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		if err := txn.Insert("rows", &floorRow{key: floorKey(l.Index), raw: l.Data}); err != nil {
			// Keys are unique by construction; an error is a bug.
			panic(fmt.Sprintf("bench: memdb floor insert at index %d: %v", l.Index, err))
		}
	}
	txn.Commit()
	return make([]any, len(logs))
}

// floorKey is a UUID-shaped key for a raft index, NUL-terminated: 37
// bytes, as berth's node keys.
func floorKey(index uint64) []byte {
	k := make([]byte, 0, 37)
	k = append(k, "00000000-0000-4000-8000-"...)
	hex := strconv.AppendUint(make([]byte, 0, 16), index&(1<<48-1), 16)
	for range 12 - len(hex) {
		k = append(k, '0')
	}
	k = append(k, hex...)
	return append(k, 0)
}
