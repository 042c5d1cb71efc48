package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Table names, as StateStore.Index takes them.
const (
	// TableNodes holds *pb.Node by ID.
	TableNodes = "nodes"
	// TableServers holds *pb.ServerMember by raft server ID.
	TableServers = "servers"
)

// tableIndex holds one *pb.TableIndex per table: the raft index of the
// table's last change. Blocking queries compare against it.
const tableIndex = "index"

// indexID is the primary index every table has.
const indexID = "id"

// tableSpec registers one table of the state store: its memdb indexes and
// how its rows travel through a snapshot. Adding a table (jobs, allocs,
// volumes, ...) is a spec in tables, read functions, and apply functions; the
// schema, snapshot and restore pick it up from here.
type tableSpec struct {
	name    string
	indexes func() map[string]*memdb.IndexSchema
	// record wraps one stored row as a snapshot record.
	record func(row any) (*pb.SnapshotRecord, error)
	// row returns the row held by rec if rec belongs to this table, else nil.
	row func(rec *pb.SnapshotRecord) proto.Message
}

// tables lists the data tables in the order a snapshot writes them.
var tables = []tableSpec{
	rowTable(TableNodes, idIndex((*pb.Node).GetId),
		func(n *pb.Node) *pb.SnapshotRecord {
			return &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Node{Node: n}}
		},
		(*pb.SnapshotRecord).GetNode),
	rowTable(TableServers, idIndex((*pb.ServerMember).GetId),
		func(s *pb.ServerMember) *pb.SnapshotRecord {
			return &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Server{Server: s}}
		},
		(*pb.SnapshotRecord).GetServer),
}

// rowTable builds a tableSpec for rows of message type M.
func rowTable[M proto.Message](
	name string,
	indexes func() map[string]*memdb.IndexSchema,
	wrap func(M) *pb.SnapshotRecord,
	unwrap func(*pb.SnapshotRecord) M,
) tableSpec {
	return tableSpec{
		name:    name,
		indexes: indexes,
		record: func(row any) (*pb.SnapshotRecord, error) {
			m, ok := row.(M)
			if !ok {
				return nil, fmt.Errorf("table %s holds a %T", name, row)
			}
			return wrap(m), nil
		},
		row: func(rec *pb.SnapshotRecord) proto.Message {
			m := unwrap(rec)
			if !m.ProtoReflect().IsValid() {
				return nil
			}
			return m
		},
	}
}

// idIndex is a unique primary index on the string key returns.
func idIndex[M any](key func(M) string) func() map[string]*memdb.IndexSchema {
	return func() map[string]*memdb.IndexSchema {
		return map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: stringKeyIndex[M]{key: key}},
		}
	}
}

// stringKeyIndex indexes rows of type M by a string key read through a
// getter. It builds exactly the keys memdb.StringFieldIndex does (the string
// and a NUL terminator; no key for ""), without reflection: every write looks
// up the key of the new row and of the row it replaces, so this is on the
// path of every command.
type stringKeyIndex[M any] struct {
	key func(M) string
}

var (
	_ memdb.SingleIndexer = stringKeyIndex[*pb.Node]{}
	_ memdb.PrefixIndexer = stringKeyIndex[*pb.Node]{}
)

// FromObject returns the key of row, which must be an M.
func (x stringKeyIndex[M]) FromObject(row any) (bool, []byte, error) {
	m, ok := row.(M)
	if !ok {
		var zero M
		return false, nil, fmt.Errorf("row is a %T, want %T", row, zero)
	}
	v := x.key(m)
	if v == "" {
		return false, nil, nil
	}
	return true, terminated(v), nil
}

// FromArgs returns the key for a lookup by one string.
func (x stringKeyIndex[M]) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("must provide only a single argument")
	}
	v, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be a string: %#v", args[0])
	}
	return terminated(v), nil
}

// PrefixFromArgs returns the key prefix for a lookup by the start of a key.
func (x stringKeyIndex[M]) PrefixFromArgs(args ...any) ([]byte, error) {
	k, err := x.FromArgs(args...)
	if err != nil {
		return nil, err
	}
	return k[:len(k)-1], nil
}

// terminated is v followed by a NUL, so that no key is a prefix of another.
func terminated(v string) []byte {
	b := make([]byte, len(v)+1)
	copy(b, v)
	return b
}

// tableNamed returns the spec of a data table.
func tableNamed(name string) (tableSpec, bool) {
	for _, t := range tables {
		if t.name == name {
			return t, true
		}
	}
	return tableSpec{}, false
}

// schema builds the memdb schema: every data table plus the index table.
func schema() *memdb.DBSchema {
	s := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableIndex: {Name: tableIndex, Indexes: idIndex((*pb.TableIndex).GetTable)()},
	}}
	for _, t := range tables {
		s.Tables[t.name] = &memdb.TableSchema{Name: t.name, Indexes: t.indexes()}
	}
	return s
}
