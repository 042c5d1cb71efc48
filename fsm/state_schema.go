package fsm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/go-memdb"
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
	// TableJobs holds the current version of each job (pb.Job) by ID.
	TableJobs = "jobs"
	// TableJobVersions holds the last JobVersionsKept versions of each job
	// (pb.Job) by job ID and version.
	TableJobVersions = "job_versions"
	// TableEvals holds evaluations (pb.Evaluation) by ID.
	TableEvals = "evals"
	// TableAllocs holds allocations (pb.Allocation) by ID.
	TableAllocs = "allocs"
	// TableNodeAllocIndex holds, per node, the raft index of the last
	// server-side change to the node's allocs (see NodeAllocsIndex).
	TableNodeAllocIndex = "node_alloc_index"
	// TableCSIPlugins holds the servers' CSI plugin table (pb.CSIPlugin) by
	// plugin ID: written only by NodeCSIUpdate and by the commands that
	// keep rows it created right (apply_csi.go).
	TableCSIPlugins = "csi_plugins"
	// TableCSIPluginInstances holds the nodes' instances of CSI plugins
	// (pb.CSIPluginInstance) by plugin, side and node, for the rows of
	// csi_plugins that hold none of their own (csi_instances.go).
	TableCSIPluginInstances = "csi_plugin_instances"
	// TableCSIPluginAllocs holds the allocations of CSI plugins
	// (pb.CSIPluginAllocRow) by plugin and alloc, for the rows of
	// csi_plugins that hold none of their own (csi_plugin_allocs.go).
	TableCSIPluginAllocs = "csi_plugin_allocs"
	// TableVolumes holds CSI volumes (pb.Volume) by ID: written by
	// VolumeRegister and VolumeDeregister, its plugin mirrors refreshed by
	// the commands that change csi_plugins rows.
	TableVolumes = "volumes"
	// TableClaims holds volume claims (pb.Claim) by claim ID.
	TableClaims = "claims"
	// TableAttachments holds controller publishes (pb.Attachment) by
	// volume and node.
	TableAttachments = "attachments"
	// TableNodeUsage holds, per node, what its allocs that are not
	// terminal hold of it (pb.NodeUsage). It is derived from the allocs
	// table (state_usage.go): never in a snapshot, never in the index
	// table, rebuilt on restore; StateStore.Index does not know it.
	TableNodeUsage = "node_usage"
)

// The data tables of this version, declared once: the schema, the typed
// reads and writes, snapshots and restore all work from these.
var (
	nodesTable   = newTable(TableNodes, (*pb.Node).GetId)
	serversTable = newTable(TableServers, (*pb.ServerMember).GetId)

	jobsTable = newTable(TableJobs, (*pb.Job).GetId)
	// jobVersionsTable's second key part is the version as a fixed-width
	// decimal (versionKey), so a job's versions sort numerically and its
	// versions are a prefix read of the primary key: no index by job needed.
	jobVersionsTable = newTable(TableJobVersions, (*pb.Job).GetId, jobVersionKey)

	evalsTable    = newTable(TableEvals, (*pb.Evaluation).GetId)
	evalsByJob    = evalsTable.index("job", (*pb.Evaluation).GetJobId)
	evalsByStatus = evalsTable.index("status", evalStatusKey)

	// allocsTable keeps node_usage (state_usage.go) and allocs_freed
	// (state_allocs_freed.go) in step with its rows.
	allocsTable  = newTable(TableAllocs, (*pb.Allocation).GetId).derive(allocNodeUsage{}).derive(allocsFreed{})
	allocsByNode = allocsTable.index("node", (*pb.Allocation).GetNodeId)
	allocsByJob  = allocsTable.index("job", (*pb.Allocation).GetJobId)
	allocsByEval = allocsTable.index("eval", (*pb.Allocation).GetEvalId)

	// nodeAllocIndexTable reuses pb.TableIndex: its table field holds the
	// node ID, its index the raft index of the last server-side change to
	// that node's allocs. A client's blocking query watches its one row, so
	// it sleeps through every client update (its own and every other
	// node's) and wakes only for what it must act on.
	nodeAllocIndexTable = newTable(TableNodeAllocIndex, (*pb.TableIndex).GetTable)

	csiPluginsTable = newTable(TableCSIPlugins, (*pb.CSIPlugin).GetId)

	volumesTable    = newTable(TableVolumes, (*pb.Volume).GetId)
	volumesByPlugin = volumesTable.index("plugin", (*pb.Volume).GetPluginId, (*pb.Volume).GetId)
	// volumesByExternal finds the volume registered for a plugin's volume.
	// VolumeRegister refuses a second ID for one (ErrExternalVolumeTaken);
	// the index is not memdb-unique, so a state that holds such a pair
	// from before the rule still restores, and both can be named.
	volumesByExternal = volumesTable.index("external", (*pb.Volume).GetPluginId, (*pb.Volume).GetExternalId, (*pb.Volume).GetId)

	// A claim's key is its own ID, set by its proposer: an operator claim
	// has no alloc, and `berth volume release CLAIM` names it. An alloc
	// holds at most one claim per volume (claimsByAlloc is unique).
	claimsTable    = newTable(TableClaims, (*pb.Claim).GetId).derive(volumeRoom[*pb.Claim]{source: TableClaims, declares: true})
	claimsByVolume = claimsTable.index("volume", (*pb.Claim).GetVolumeId, (*pb.Claim).GetId)
	claimsByNode   = claimsTable.index("node", (*pb.Claim).GetNodeId, (*pb.Claim).GetVolumeId, (*pb.Claim).GetId)
	claimsByAlloc  = claimsTable.uniqueIndex("alloc", (*pb.Claim).GetAllocId, (*pb.Claim).GetVolumeId)
	// claimsByState lets the reaper list the releasing (or node-detached)
	// claims without a scan. It holds only those (claimStateKey): the
	// claims that hold a volume are most of the table and nobody lists
	// them by state, so a reservation writes one index tree fewer.
	claimsByState = claimsTable.index("state", claimStateKey, (*pb.Claim).GetId)

	attachmentsTable   = newTable(TableAttachments, (*pb.Attachment).GetVolumeId, (*pb.Attachment).GetNodeId).derive(volumeRoom[*pb.Attachment]{source: TableAttachments})
	attachmentsByNode  = attachmentsTable.index("node", (*pb.Attachment).GetNodeId, (*pb.Attachment).GetVolumeId)
	attachmentsByState = attachmentsTable.index("state", attachmentStateKey, (*pb.Attachment).GetVolumeId, (*pb.Attachment).GetNodeId)

	// nodeUsageTable is derived from allocsTable, declared by its derive:
	// it is in no schema's table list, so snapshots leave it out.
	nodeUsageTable = newTable(TableNodeUsage, (*pb.NodeUsage).GetNodeId)
)

// claimStateKey and attachmentStateKey are states as key parts: the enum's
// number, so a state this version does not know still has a key. A claim
// before releasing has none, so it is in no state index (claimIndexedState).
func claimStateKey(c *pb.Claim) string {
	if !claimIndexedState(c.GetState()) {
		return ""
	}
	return strconv.Itoa(int(c.GetState()))
}

// claimIndexedState reports whether claimsByState holds the claims in s:
// releasing and the states after it, which the reaper acts on.
func claimIndexedState(s pb.ClaimState) bool { return s >= pb.ClaimState_CLAIM_STATE_RELEASING }

func attachmentStateKey(a *pb.Attachment) string { return strconv.Itoa(int(a.GetState())) }

// versionKey is a job version as a key part: 20 decimal digits, enough for
// any uint64, so versions sort as numbers do.
func versionKey(v uint64) string {
	var buf [20]byte
	for i := len(buf) - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return string(buf[:])
}

func jobVersionKey(j *pb.Job) string { return versionKey(j.GetVersion()) }

// evalStatusKey is an eval's status as a key part: the enum's number, so a
// status this version does not know still has a key.
func evalStatusKey(e *pb.Evaluation) string { return statusKey(e.GetStatus()) }

func statusKey(s pb.EvalStatus) string { return strconv.Itoa(int(s)) }

// productionSchema is what New builds an FSM from: every table, in the order
// a snapshot writes them, and every command.
func productionSchema() schema {
	return schema{tables: []tableDef{
		nodesTable, serversTable,
		jobsTable, jobVersionsTable, evalsTable, allocsTable, nodeAllocIndexTable,
		csiPluginsTable, csiInstancesTable, csiAllocsTable,
		volumesTable, claimsTable, attachmentsTable,
		hostVolumesTable,
		aclPoliciesTable, aclTokensTable, aclBootstrapTable,
	}, commands: commands}
}

// schema is what an FSM is built from: its data tables and the commands it
// applies. New uses productionSchema; tests build FSMs over tables and
// commands of their own (see newFSM) without touching this version's.
type schema struct {
	tables   []tableDef
	commands map[MessageType]command
}

// table returns the data table called name.
func (s schema) table(name string) (tableDef, bool) {
	for _, t := range s.tables {
		if t.tableName() == name {
			return t, true
		}
	}
	return nil, false
}

// memdb builds the go-memdb schema: every data table plus the index table.
func (s schema) memdb() *memdb.DBSchema {
	db := &memdb.DBSchema{Tables: map[string]*memdb.TableSchema{
		tableIndex: {Name: tableIndex, Indexes: map[string]*memdb.IndexSchema{
			indexID: {Name: indexID, Unique: true, Indexer: keyIndex[*pb.TableIndex]{parts: []func(*pb.TableIndex) string{(*pb.TableIndex).GetTable}}},
		}},
	}}
	for _, t := range s.tables {
		db.Tables[t.tableName()] = t.memdbSchema()
		for _, d := range t.derivedSchemas() {
			db.Tables[d.Name] = d
		}
	}
	return db
}

// tableIndex holds one *pb.TableIndex per table: the raft index of the
// table's last change. Blocking queries compare against it.
const tableIndex = "index"

// indexID is the name go-memdb requires of every table's primary index.
const indexID = "id"

// table declares a data table whose rows are messages of type M. Its
// primary key is one or more string parts read from a row (a claim: volume
// and alloc); secondary indexes are declared with index and uniqueIndex:
//
//	var claimsTable = newTable("claims", (*pb.Claim).GetVolumeId, (*pb.Claim).GetAllocId)
//	var claimsByNode = claimsTable.index("node", (*pb.Claim).GetNodeId)
//
// Every read takes a txnSource: a reader (StateStore, StateSnapshot) or
// the writeTxn an apply function holds, which sees every row written
// earlier in its raft batch, through every index.
//
// Rows are the messages themselves, shared by every reader: nothing may
// mutate a message once it is stored. An update stores a new message
// (proto.Clone the old one, then change the clone).
type table[M proto.Message] struct {
	name    string
	primary *index[M]
	// secondary lists the indexes declared with index and uniqueIndex.
	secondary []*index[M]
	// derived lists the state kept from this table's rows (derive).
	derived []derived[M]
}

// derived is state the store computes from one table's rows and keeps in
// a memdb table of its own, so that an apply reads one row where it would
// otherwise sum many. It is written in the transaction that changes the
// rows it is computed from (insert and delete call changed), so every
// read through a batch's transaction sees it current; it is never written
// to a snapshot, and Restore rebuilds it from the rows it restored. Most
// of it is a function of the rows alone; the high-water marks
// (allocs_freed, volume_room) are not, and a restore sets them from what
// the rows show (see AllocsFreedIndex, VolumeRoomIndex), which may differ
// from what the history that built the rows left. Its
// writes count as writes (a command failing after one redoes its batch)
// but touch no table index: they change nothing a reader could watch that
// its source rows did not.
type derived[M proto.Message] interface {
	// schema is the memdb table the derived rows live in; nil when
	// another table's derived state declares it (volume_room).
	schema() *memdb.TableSchema
	// changed updates the derived rows for a row going from old to new,
	// either the zero M (a nil pointer) for an insert or a delete.
	changed(tx *writeTxn, old, new M) error
	// rebuild writes the derived rows of every row of src in txn, whose
	// derived table is empty.
	rebuild(txn *memdb.Txn, src *table[M]) error
}

// derive declares d as kept from t's rows and returns t. Call it where the
// table is declared.
func (t *table[M]) derive(d derived[M]) *table[M] {
	t.derived = append(t.derived, d)
	return t
}

// index is one index of a table: its memdb name and the parts of its keys.
type index[M proto.Message] struct {
	table  *table[M]
	name   string
	unique bool
	key    keyIndex[M]
}

// newTable declares a table of messages M called name, whose primary key is
// the parts read by id, in order. Every part of a stored row's primary key
// must be non-empty.
func newTable[M proto.Message](name string, id ...func(M) string) *table[M] {
	if len(id) == 0 {
		panic(fmt.Sprintf("fsm: table %s has no primary key", name))
	}
	t := &table[M]{name: name}
	t.primary = &index[M]{table: t, name: indexID, unique: true, key: keyIndex[M]{parts: id}}
	return t
}

// index declares a secondary index called name over the parts read by
// parts: many rows may share a key. A row is in the index only when every
// part of its key is non-empty (an unplaced claim is in no node's list).
// Call it where the table is declared, before any FSM is built.
func (t *table[M]) index(name string, parts ...func(M) string) *index[M] {
	return t.addIndex(name, false, parts)
}

// uniqueIndex declares a secondary index on which no two rows may share a
// key: an insert that would break that fails.
func (t *table[M]) uniqueIndex(name string, parts ...func(M) string) *index[M] {
	return t.addIndex(name, true, parts)
}

func (t *table[M]) addIndex(name string, unique bool, parts []func(M) string) *index[M] {
	if len(parts) == 0 || name == indexID || strings.HasSuffix(name, "_prefix") {
		panic(fmt.Sprintf("fsm: table %s: index %q needs parts and a name other than %q or *_prefix", t.name, name, indexID))
	}
	for _, x := range t.secondary {
		if x.name == name {
			panic(fmt.Sprintf("fsm: table %s: index %q declared twice", t.name, name))
		}
	}
	key := keyIndex[M]{parts: parts}
	if !unique {
		key.appended = t.primary.key.parts
	}
	x := &index[M]{table: t, name: name, unique: unique, key: key}
	t.secondary = append(t.secondary, x)
	return x
}

// tableDef is a table with its message type erased: what the schema,
// snapshots and restore need of every table.
type tableDef interface {
	tableName() string
	memdbSchema() *memdb.TableSchema
	// messageType is the type of the table's rows.
	messageType() protoreflect.MessageType
	// eachRow calls fn with every row in primary-key order.
	eachRow(txn memdbReader, fn func(proto.Message) error) error
	// restoreRow stores a row read from a snapshot. It refuses a row of
	// another type, one whose primary key is incomplete, one whose key
	// does not come after prev's (a snapshot writes each table in key
	// order), and one whose key in a unique index a row stored before it
	// holds, returning the row's key for the next call.
	restoreRow(txn *memdb.Txn, row proto.Message, prev []byte) ([]byte, error)
	// derivedSchemas are the memdb tables of the state derived from this
	// table's rows (derive); rebuildDerived fills them from the rows txn
	// holds, once a restore has read every row.
	derivedSchemas() []*memdb.TableSchema
	rebuildDerived(txn *memdb.Txn) error
}

var _ tableDef = (*table[*pb.Node])(nil)

func (t *table[M]) tableName() string { return t.name }

func (t *table[M]) messageType() protoreflect.MessageType {
	var zero M
	return zero.ProtoReflect().Type()
}

func (t *table[M]) memdbSchema() *memdb.TableSchema {
	s := &memdb.TableSchema{Name: t.name, Indexes: map[string]*memdb.IndexSchema{
		indexID: {Name: indexID, Unique: true, Indexer: t.primary.key},
	}}
	for _, x := range t.secondary {
		s.Indexes[x.name] = &memdb.IndexSchema{Name: x.name, Unique: x.unique, AllowMissing: true, Indexer: x.key}
	}
	return s
}

func (t *table[M]) derivedSchemas() []*memdb.TableSchema {
	var out []*memdb.TableSchema
	for _, d := range t.derived {
		if s := d.schema(); s != nil { // nil: another table's derived state declares it
			out = append(out, s)
		}
	}
	return out
}

func (t *table[M]) rebuildDerived(txn *memdb.Txn) error {
	for _, d := range t.derived {
		if err := d.rebuild(txn, t); err != nil {
			return fmt.Errorf("rebuilding what table %s derives: %w", t.name, err)
		}
	}
	return nil
}

func (t *table[M]) eachRow(txn memdbReader, fn func(proto.Message) error) error {
	return t.primary.each(txn, nil, nil, func(m M) error { return fn(m) })
}

func (t *table[M]) restoreRow(txn *memdb.Txn, row proto.Message, prev []byte) ([]byte, error) {
	m, ok := row.(M)
	if !ok {
		return nil, fmt.Errorf("%s row is a %T, want %T", t.name, row, m)
	}
	ok, key, err := t.primary.key.FromObject(m)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s row without a complete key (%s)", t.name, t.keyString(m))
	}
	if prev != nil && string(key) <= string(prev) {
		return nil, fmt.Errorf("%s row %s out of key order, or twice", t.name, t.keyString(m))
	}
	if x, other, err := t.uniqueClash(txn, m); err != nil {
		return nil, err
	} else if x != nil {
		return nil, fmt.Errorf("%s rows %s and %s share %s %q, a unique index", t.name, t.keyString(other), t.keyString(m), x.name, x.keyParts(m))
	}
	if err := txn.Insert(t.name, m); err != nil {
		return nil, fmt.Errorf("storing %s row %s: %w", t.name, t.keyString(m), err)
	}
	return key, nil
}

// keyString is m's primary key for messages: its parts quoted, joined
// with "/" (`"v1"/"a1"`).
func (t *table[M]) keyString(m M) string {
	var b strings.Builder
	for i, part := range t.primary.key.parts {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprintf(&b, "%q", part(m))
	}
	return b.String()
}

// keyIndex builds the keys of an index whose key is one or more string
// parts of a row M. Each part is written with its NUL bytes escaped
// (0x00 0xff) and ends with 0x00 0x01, so no part's encoding is a prefix of
// another's: a prefix of the parts is exactly a byte prefix of the key,
// which is what lookups by the first parts (PrefixFromArgs) rely on, and
// keys sort as their parts do, part by part. A row whose key has an empty
// part is not in the index (memdb.StringFieldIndex leaves out "" too).
//
// Built without reflection: every write computes the keys of the new row
// and of the row it replaces, so this is on the path of every command.
type keyIndex[M proto.Message] struct {
	parts []func(M) string
	// appended are the primary key's parts on a non-unique index: memdb
	// appends the row's primary key to its key there, so FromObject leaves
	// room for it (one allocation per key, not two and a copy).
	appended []func(M) string
}

var (
	_ memdb.SingleIndexer = keyIndex[*pb.Node]{}
	_ memdb.PrefixIndexer = keyIndex[*pb.Node]{}
)

// FromObject returns the key of obj, which must be an M.
func (x keyIndex[M]) FromObject(obj any) (bool, []byte, error) {
	m, ok := obj.(M)
	if !ok {
		var zero M
		return false, nil, fmt.Errorf("row is a %T, want %T", obj, zero)
	}
	size := 0
	for _, part := range x.parts {
		v := part(m)
		if v == "" {
			return false, nil, nil
		}
		size += keyPartLen(v)
	}
	for _, part := range x.appended {
		size += keyPartLen(part(m))
	}
	key := make([]byte, 0, size)
	for _, part := range x.parts {
		key = appendKeyPart(key, part(m))
	}
	return true, key, nil
}

// keyPartLen is the length appendKeyPart adds for v.
func keyPartLen(v string) int {
	return len(v) + strings.Count(v, "\x00") + 2
}

// FromArgs returns the key for a lookup by every part, each a string.
func (x keyIndex[M]) FromArgs(args ...any) ([]byte, error) {
	if k, ok := encodedArg(args); ok {
		if k.parts != len(x.parts) {
			return nil, fmt.Errorf("lookup by %d key parts, the index has %d", k.parts, len(x.parts))
		}
		return k.key, nil
	}
	if len(args) != len(x.parts) {
		return nil, fmt.Errorf("lookup by %d key parts, the index has %d", len(args), len(x.parts))
	}
	return keyOf(args)
}

// PrefixFromArgs returns the key prefix for a lookup by the first
// len(args) parts (none: every row).
func (x keyIndex[M]) PrefixFromArgs(args ...any) ([]byte, error) {
	if k, ok := encodedArg(args); ok {
		if k.parts > len(x.parts) {
			return nil, fmt.Errorf("lookup by %d key parts, the index has %d", k.parts, len(x.parts))
		}
		return k.key, nil
	}
	if len(args) > len(x.parts) {
		return nil, fmt.Errorf("lookup by %d key parts, the index has %d", len(args), len(x.parts))
	}
	return keyOf(args)
}

// encodedArg returns the key stringArgs encoded, when args is one.
func encodedArg(args []any) (*keyArg, bool) {
	if len(args) != 1 {
		return nil, false
	}
	k, ok := args[0].(*keyArg)
	return k, ok
}

// keyOf encodes string arguments as key parts.
func keyOf(args []any) ([]byte, error) {
	var key []byte
	for i, a := range args {
		v, ok := a.(string)
		if !ok {
			return nil, fmt.Errorf("key part %d is a %T, want a string", i, a)
		}
		key = appendKeyPart(key, v)
	}
	return key, nil
}

// appendKeyPart appends one key part: v with each NUL escaped, then the
// terminator. 0x00 0xff sorts after 0x00 0x01, so a part sorts after every
// part it is a proper prefix of, as strings do.
func appendKeyPart(key []byte, v string) []byte {
	for {
		i := strings.IndexByte(v, 0)
		if i < 0 {
			break
		}
		key = append(append(key, v[:i]...), 0x00, 0xff)
		v = v[i+1:]
	}
	return append(append(key, v...), 0x00, 0x01)
}
