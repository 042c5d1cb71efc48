package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// SnapshotVersion is the snapshot format this version writes. Restore reads
// this and every older version, and refuses newer ones with
// ErrSnapshotVersion.
//
// A snapshot stream is a length-delimited (varint size, as protodelim)
// pb.SnapshotHeader followed by length-delimited pb.SnapshotRecords. In
// version 2 every record names its table: a TableRow per row (each table's
// rows in primary-key order, each key once), a TableIndex per table, and
// last a SnapshotEnd holding how many records came before it.
//
// Tables are added without a new version: Restore skips, and logs, the
// rows and index of a table it does not know. That is safe only under the
// table rule in the package documentation (Snapshots), which every new
// table and command must keep. Everything else is strict and makes the
// snapshot ErrSnapshotCorrupt: a row of a known table that does not decode
// or breaks a key (out of order, twice, sharing a unique key), a field
// this version does not know in the header or a record wrapper, a missing
// SnapshotEnd or a wrong count. A new record kind or wrapper field needs
// a new version.
//
// Version 1 wrote node and server records, then the TableIndex of each of
// its two tables as the trailer; Restore still reads it.
const SnapshotVersion uint32 = 2

// snapshotV1Tables are the tables of version 1, each of which needed an
// index record: that is how it told a complete stream from a cut one.
var snapshotV1Tables = []string{TableNodes, TableServers}

// maxSnapshotRecord bounds one record so a corrupt length prefix cannot make
// Restore allocate gigabytes; the largest rows (jobs with many groups) are far
// below it.
const maxSnapshotRecord = 64 << 20

// fsmSnapshot is a point-in-time state waiting for raft to persist it.
type fsmSnapshot struct {
	state *StateSnapshot
}

var _ raft.FSMSnapshot = (*fsmSnapshot)(nil)

// Persist writes the snapshot to sink, closing it on success and cancelling
// it on failure, as raft requires.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeSnapshot(sink, s.state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persisting fsm snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("closing fsm snapshot sink: %w", err)
	}
	return nil
}

// Release does nothing: the pinned state is garbage once unreferenced.
func (s *fsmSnapshot) Release() {}

// writeSnapshot streams st to w in the current format.
func writeSnapshot(w io.Writer, st *StateSnapshot) error {
	bw := bufio.NewWriter(w)
	if _, err := protodelim.MarshalTo(bw, &pb.SnapshotHeader{Version: SnapshotVersion}); err != nil {
		return fmt.Errorf("writing snapshot header: %w", err)
	}
	var records uint64
	write := func(rec *pb.SnapshotRecord) error {
		records++
		_, err := protodelim.MarshalTo(bw, rec)
		return err
	}
	txn := st.db.Txn(false)
	row := &pb.TableRow{}
	rec := &pb.SnapshotRecord{Record: &pb.SnapshotRecord_Row{Row: row}}
	for _, t := range st.schema.tables {
		row.Table = t.tableName()
		err := t.eachRow(txn, func(m proto.Message) error {
			var err error
			if row.Row, err = encodeOptions.MarshalAppend(row.Row[:0], m); err != nil {
				return fmt.Errorf("encoding %s row: %w", t.tableName(), err)
			}
			if err := write(rec); err != nil {
				return fmt.Errorf("writing %s row: %w", t.tableName(), err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, t := range st.schema.tables {
		index, err := st.Index(t.tableName())
		if err != nil {
			return err
		}
		err = write(&pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{
			TableIndex: &pb.TableIndex{Table: t.tableName(), Index: index},
		}})
		if err != nil {
			return fmt.Errorf("writing index of table %s: %w", t.tableName(), err)
		}
	}
	end := &pb.SnapshotRecord{Record: &pb.SnapshotRecord_End{End: &pb.SnapshotEnd{Records: records}}}
	if _, err := protodelim.MarshalTo(bw, end); err != nil {
		return fmt.Errorf("writing snapshot end: %w", err)
	}
	return bw.Flush()
}

// readSnapshot reads a whole snapshot stream into a new store of f's
// tables. It returns the store only if the stream was complete and every
// row of a known table stored. Plugin rows that break checkPluginRows it
// refuses if strict, and otherwise rebuilds (restorePluginRows).
func (f *FSM) readSnapshot(r io.Reader, strict bool) (*StateStore, error) {
	br := bufio.NewReader(r)
	v, err := readHeader(br)
	if err != nil {
		return nil, err
	}

	store := newStateStore(f.schema)
	store.turns = &f.turn
	rs := &restoring{txn: store.db.Txn(true), schema: f.schema, version: v,
		prev: map[string][]byte{}, indexed: map[string]bool{}, skipped: map[string]int{}}
	defer rs.txn.Abort()
	if err := rs.readRecords(br); err != nil {
		return nil, err
	}
	if len(rs.skipped) > 0 {
		args := []any{"version", v}
		for _, name := range slices.Sorted(maps.Keys(rs.skipped)) {
			args = append(args, name, rs.skipped[name])
		}
		f.logger.Warn("snapshot holds tables this server does not know: skipped their records", args...)
	}
	if hasPluginTables(f.schema) {
		if err := f.restorePluginRows(rs.txn, strict); err != nil {
			return nil, err
		}
	}
	// No snapshot carries derived state: it is computed from the rows.
	for _, t := range f.schema.tables {
		if err := t.rebuildDerived(rs.txn); err != nil {
			return nil, err
		}
	}
	rs.txn.Commit()
	return store, nil
}

// readHeader reads a snapshot stream's header and returns its version,
// refusing a version this server cannot read (ErrSnapshotVersion) and a
// header that is not one (ErrSnapshotCorrupt).
func readHeader(br *bufio.Reader) (uint32, error) {
	buf, err := readDelimited(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%w: empty stream, no header", ErrSnapshotCorrupt)
		}
		return 0, fmt.Errorf("%w: reading header: %w", ErrSnapshotCorrupt, err)
	}
	var hdr pb.SnapshotHeader
	if err := proto.Unmarshal(buf, &hdr); err != nil {
		return 0, fmt.Errorf("%w: reading header: %w", ErrSnapshotCorrupt, err)
	}
	v := hdr.GetVersion()
	switch {
	case v > SnapshotVersion:
		return 0, fmt.Errorf("%w: snapshot is version %d, this server reads up to %d (upgrade it)",
			ErrSnapshotVersion, v, SnapshotVersion)
	case v == 0:
		return 0, fmt.Errorf("%w: header names version 0, which was never written", ErrSnapshotCorrupt)
	case hasUnknownFields(&hdr):
		return 0, fmt.Errorf("%w: header holds a field version %d does not have", ErrSnapshotCorrupt, v)
	}
	return v, nil
}

// readDelimited reads one length-delimited message (a varint size, then
// that many bytes, as protodelim writes them) into a new slice. It returns
// io.EOF only at a clean end of the stream, before any byte of a record.
func readDelimited(br *bufio.Reader) ([]byte, error) {
	size, err := binary.ReadUvarint(br)
	if err != nil {
		if err == io.EOF {
			return nil, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("length prefix cut off: %w", err)
		}
		return nil, fmt.Errorf("length prefix: %w", err)
	}
	if size > maxSnapshotRecord {
		return nil, fmt.Errorf("record of %d bytes, over the limit of %d", size, maxSnapshotRecord)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(br, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("record of %d bytes cut off: %w", size, err)
	}
	return buf, nil
}

// restoring is the state of one restore as it reads records.
type restoring struct {
	txn     *memdb.Txn
	schema  schema
	version uint32
	// records counts the records read after the header.
	records uint64
	// prev is the primary key of the last row stored per table.
	prev map[string][]byte
	// indexed records the tables whose index record was read.
	indexed map[string]bool
	// skipped counts the records of each table this version does not know.
	skipped map[string]int
	// ended is set once the SnapshotEnd record was read (version 2).
	ended bool
}

// decodedRecord is one record of a stream decoded, ready to store: the
// decoding depends on nothing stored before it, so records are decoded on
// several cores at once (readRecords) and stored in stream order.
type decodedRecord struct {
	rec *pb.SnapshotRecord
	// row is the decoded row of a version 2 TableRow of a known table.
	row proto.Message
	err error
}

// decodeRecord decodes buf, the encoding of a pb.SnapshotRecord of a
// stream of the given version, with its row if it is one of a table s
// knows.
func decodeRecord(s schema, version uint32, buf []byte) decodedRecord {
	rec := &pb.SnapshotRecord{}
	if err := proto.Unmarshal(buf, rec); err != nil {
		return decodedRecord{err: err}
	}
	// The header and the record wrappers (SnapshotRecord, TableRow,
	// TableIndex, SnapshotEnd) change only with a new version, so a field
	// this version does not know is corruption, not something to skip: a
	// new record kind, or a TableRow.compressed that would make the row
	// bytes mean something else. Rows themselves stay forward-compatible:
	// their unknown fields are kept, as everywhere else.
	if hasUnknownFields(rec) {
		return decodedRecord{err: errors.New("record holds a field this version does not know")}
	}
	if w := recordWrapper(rec); w != nil && hasUnknownFields(w) {
		return decodedRecord{err: fmt.Errorf("%s record holds a field this version does not know", w.ProtoReflect().Descriptor().Name())}
	}
	d := decodedRecord{rec: rec}
	if r, ok := rec.GetRecord().(*pb.SnapshotRecord_Row); ok && version != 1 {
		name := r.Row.GetTable()
		if t, ok := s.table(name); ok {
			m := t.messageType().New().Interface()
			if err := proto.Unmarshal(r.Row.GetRow(), m); err != nil {
				return decodedRecord{err: fmt.Errorf("%s row: %w", name, err)}
			}
			d.row = m
		}
	}
	return d
}

// record stores one record, the encoding of a pb.SnapshotRecord.
func (rs *restoring) record(buf []byte) error {
	if rs.ended {
		return errors.New("record after the end of the snapshot")
	}
	return rs.store(decodeRecord(rs.schema, rs.version, buf))
}

// store stores one decoded record.
func (rs *restoring) store(d decodedRecord) error {
	if rs.ended {
		return errors.New("record after the end of the snapshot")
	}
	if d.err != nil {
		return d.err
	}
	rec := d.rec
	rs.records++
	if rs.version == 1 {
		return rs.recordV1(rec)
	}
	switch r := rec.GetRecord().(type) {
	case *pb.SnapshotRecord_Row:
		name := r.Row.GetTable()
		t, ok := rs.schema.table(name)
		if !ok {
			return rs.skip(name)
		}
		return rs.storeRow(t, d.row)
	case *pb.SnapshotRecord_TableIndex:
		name := r.TableIndex.GetTable()
		if _, ok := rs.schema.table(name); !ok {
			return rs.skip(name)
		}
		return rs.storeIndex(r.TableIndex)
	case *pb.SnapshotRecord_End:
		rs.records-- // the end does not count itself
		if got, want := r.End.GetRecords(), rs.records; got != want {
			return fmt.Errorf("end record counts %d records, the stream holds %d", got, want)
		}
		rs.ended = true
		return nil
	case nil:
		return errors.New("empty record")
	default:
		return fmt.Errorf("%T record in a version %d snapshot", r, rs.version)
	}
}

// recordWrapper returns the record's TableRow, TableIndex or SnapshotEnd,
// nil for the other kinds (a version 1 Node or ServerMember is a row).
func recordWrapper(rec *pb.SnapshotRecord) proto.Message {
	switch r := rec.GetRecord().(type) {
	case *pb.SnapshotRecord_Row:
		return r.Row
	case *pb.SnapshotRecord_TableIndex:
		return r.TableIndex
	case *pb.SnapshotRecord_End:
		return r.End
	}
	return nil
}

// hasUnknownFields reports whether m was decoded with fields its message
// type does not declare.
func hasUnknownFields(m proto.Message) bool {
	return len(m.ProtoReflect().GetUnknown()) > 0
}

// skip counts a record of a table this version does not know.
func (rs *restoring) skip(table string) error {
	if table == "" {
		return errors.New("record names no table")
	}
	rs.skipped[table]++
	return nil
}

// recordV1 stores one record of a version 1 stream: node and server rows,
// then the index records of both tables.
func (rs *restoring) recordV1(rec *pb.SnapshotRecord) error {
	var row proto.Message
	var name string
	switch r := rec.GetRecord().(type) {
	case *pb.SnapshotRecord_Node:
		row, name = r.Node, TableNodes
	case *pb.SnapshotRecord_Server:
		row, name = r.Server, TableServers
	case *pb.SnapshotRecord_TableIndex:
		name := r.TableIndex.GetTable()
		if !slices.Contains(snapshotV1Tables, name) {
			return fmt.Errorf("index record for unknown table %q", name)
		}
		if _, ok := rs.schema.table(name); !ok {
			rs.indexed[name] = true
			return rs.skip(name)
		}
		return rs.storeIndex(r.TableIndex)
	case nil:
		return errors.New("empty record")
	default:
		return fmt.Errorf("%T record in a version 1 snapshot", r)
	}
	if len(rs.indexed) > 0 {
		return errors.New("row after the index records")
	}
	t, ok := rs.schema.table(name)
	if !ok {
		return rs.skip(name)
	}
	return rs.storeRow(t, row)
}

// storeRow stores a decoded row of table t.
func (rs *restoring) storeRow(t tableDef, row proto.Message) error {
	key, err := t.restoreRow(rs.txn, row, rs.prev[t.tableName()])
	if err != nil {
		return err
	}
	rs.prev[t.tableName()] = key
	return nil
}

// storeIndex stores one table's index record.
func (rs *restoring) storeIndex(ti *pb.TableIndex) error {
	name := ti.GetTable()
	if rs.indexed[name] {
		return fmt.Errorf("second index record for table %s", name)
	}
	rs.indexed[name] = true
	if ti.GetIndex() == 0 {
		// Never written: an absent row means the same, and keeps a
		// restored store identical to the one snapshotted.
		return nil
	}
	if err := rs.txn.Insert(tableIndex, ti); err != nil {
		return fmt.Errorf("storing index of table %s: %w", name, err)
	}
	return nil
}

// finish checks, at the end of the stream, that nothing was cut off.
func (rs *restoring) finish() error {
	if rs.version == 1 {
		for _, name := range snapshotV1Tables {
			if !rs.indexed[name] {
				return fmt.Errorf("stream ends without the index record of table %s (truncated)", name)
			}
		}
		return nil
	}
	if !rs.ended {
		return fmt.Errorf("stream ends after %d records without its end record (truncated)", rs.records)
	}
	return nil
}
