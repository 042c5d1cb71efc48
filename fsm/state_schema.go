package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"berth.dev/berth/rpc/pb"
)

// Table names, as StateStore.Index takes them.
const (
	// TableNodes holds nodes (pb.Node) by ID.
	TableNodes = "nodes"
	// TableServers holds servers (pb.ServerMember) by raft server ID.
	TableServers = "servers"
)

// tableIndex holds one *pb.TableIndex per table: the raft index of the
// table's last change. Blocking queries compare against it.
const tableIndex = "index"

// indexID is the primary index every table has.
const indexID = "id"

// tableSpec registers one data table of the state store. Its rows are
// *row: encodings of message, keyed by the message's string field key. In a
// snapshot each row is a pb.SnapshotRecord holding the message in field
// record. Adding a table (jobs, allocs, volumes, ...) is a spec in tables,
// read functions, and apply functions; the schema, snapshot and restore pick
// it up from here.
type tableSpec struct {
	name   string
	key    protowire.Number
	record protowire.Number
}

// tables lists the data tables in the order a snapshot writes them.
var tables = []tableSpec{
	dataTable(TableNodes, (*pb.Node)(nil), "id", "node"),
	dataTable(TableServers, (*pb.ServerMember)(nil), "id", "server"),
}

// dataTable builds the spec of a table of messages like m, keyed by their
// field key and carried in snapshots in pb.SnapshotRecord's field record. It
// panics when record does not hold m's type, which the tests catch at once:
// Restore would check the table's rows against another message.
func dataTable(name string, m proto.Message, key, record protoreflect.Name) tableSpec {
	md := m.ProtoReflect().Descriptor()
	num := fieldNumber(snapshotRecordDesc, record)
	if got := snapshotRecordDesc.Fields().ByNumber(num).Message(); got == nil || got.FullName() != md.FullName() {
		panic(fmt.Sprintf("fsm: table %s: SnapshotRecord.%s does not hold a %s", name, record, md.FullName()))
	}
	return tableSpec{name: name, key: fieldNumber(md, key), record: num}
}

var snapshotRecordDesc = (*pb.SnapshotRecord)(nil).ProtoReflect().Descriptor()

// rowKeyIndex is the primary index of a data table: a row's key, as
// memdb.StringFieldIndex would build it.
type rowKeyIndex struct{}

var _ memdb.SingleIndexer = rowKeyIndex{}

// FromObject returns the key of a *row.
func (rowKeyIndex) FromObject(obj any) (bool, []byte, error) {
	r, ok := obj.(*row)
	if !ok {
		return false, nil, fmt.Errorf("row is a %T, want *fsm.row", obj)
	}
	if r.key == "" {
		return false, nil, nil
	}
	return true, r.indexKey, nil
}

// FromArgs returns the key for a lookup by one string.
func (rowKeyIndex) FromArgs(args ...any) ([]byte, error) { return stringArg(args) }

// stringKeyIndex indexes rows of type M by a string key read through a
// getter. It builds exactly the keys memdb.StringFieldIndex does (the string
// and a NUL terminator; no key for ""), without reflection: every write looks
// up the key of the new row and of the row it replaces, so this is on the
// path of every command.
type stringKeyIndex[M any] struct {
	key func(M) string
}

var _ memdb.SingleIndexer = stringKeyIndex[*pb.TableIndex]{}

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
func (x stringKeyIndex[M]) FromArgs(args ...any) ([]byte, error) { return stringArg(args) }

// stringArg is the key for a lookup by one string.
func stringArg(args []any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("must provide only a single argument")
	}
	v, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be a string: %#v", args[0])
	}
	return terminated(v), nil
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
		tableIndex: {Name: tableIndex, Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: stringKeyIndex[*pb.TableIndex]{key: (*pb.TableIndex).GetTable}},
		}},
	}}
	for _, t := range tables {
		s.Tables[t.name] = &memdb.TableSchema{Name: t.name, Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: rowKeyIndex{}},
		}}
	}
	return s
}
