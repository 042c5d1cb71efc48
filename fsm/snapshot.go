package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/go-memdb"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// SnapshotVersion is the snapshot format this version writes. Restore reads
// this and every older version, and refuses newer ones with
// ErrSnapshotVersion.
//
// A snapshot stream is a length-delimited (varint size, as protodelim) pb.SnapshotHeader
// followed by length-delimited pb.SnapshotRecords until EOF: first the rows
// of every data table, table by table in key order, then one TableIndex
// record per table of the version, the index records last.
const SnapshotVersion uint32 = 1

// snapshotTables lists, per format version, the tables a snapshot of that
// version holds. Each needs an index record, which is how Restore tells a
// complete stream from one cut off at a record boundary. A new table means a
// new version, so an older server refuses the snapshot rather than dropping
// the table's rows.
var snapshotTables = map[uint32][]string{
	1: {TableNodes, TableServers},
}

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

// writeSnapshot streams st to w in the current format. Rows are written as
// the tables hold them, as encodings, so a snapshot decodes nothing.
func writeSnapshot(w io.Writer, st *StateSnapshot) error {
	bw := bufio.NewWriter(w)
	if _, err := protodelim.MarshalTo(bw, &pb.SnapshotHeader{Version: SnapshotVersion}); err != nil {
		return fmt.Errorf("writing snapshot header: %w", err)
	}
	txn := st.db.Txn(false)
	var prefix []byte
	for _, t := range tables {
		err := eachRow(txn, nil, t.name, func(r *row) error {
			// A length-delimited SnapshotRecord holding the row in field
			// t.record: record length, tag, row length, row.
			size := protowire.SizeTag(t.record) + protowire.SizeBytes(len(r.raw))
			prefix = protowire.AppendVarint(prefix[:0], uint64(size))
			prefix = protowire.AppendTag(prefix, t.record, protowire.BytesType)
			prefix = protowire.AppendVarint(prefix, uint64(len(r.raw)))
			if _, err := bw.Write(prefix); err != nil {
				return fmt.Errorf("writing %s row: %w", t.name, err)
			}
			if _, err := bw.Write(r.raw); err != nil {
				return fmt.Errorf("writing %s row: %w", t.name, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, name := range snapshotTables[SnapshotVersion] {
		index, err := st.Index(name)
		if err != nil {
			return err
		}
		rec := &pb.SnapshotRecord{Record: &pb.SnapshotRecord_TableIndex{
			TableIndex: &pb.TableIndex{Table: name, Index: index},
		}}
		if _, err := protodelim.MarshalTo(bw, rec); err != nil {
			return fmt.Errorf("writing index of table %s: %w", name, err)
		}
	}
	return bw.Flush()
}

// readSnapshot reads a whole snapshot stream into a new state store. It
// returns the store only if the stream was complete and every row stored.
func readSnapshot(r io.Reader) (*StateStore, error) {
	br := bufio.NewReader(r)
	buf, err := readDelimited(br)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty stream, no header", ErrSnapshotCorrupt)
		}
		return nil, fmt.Errorf("%w: reading header: %w", ErrSnapshotCorrupt, err)
	}
	var hdr pb.SnapshotHeader
	if err := proto.Unmarshal(buf, &hdr); err != nil {
		return nil, fmt.Errorf("%w: reading header: %w", ErrSnapshotCorrupt, err)
	}
	if hdr.GetVersion() > SnapshotVersion {
		return nil, fmt.Errorf("%w: snapshot is version %d, this server reads up to %d (upgrade it)",
			ErrSnapshotVersion, hdr.GetVersion(), SnapshotVersion)
	}
	want, ok := snapshotTables[hdr.GetVersion()]
	if !ok {
		return nil, fmt.Errorf("%w: header names version %d, which was never written", ErrSnapshotCorrupt, hdr.GetVersion())
	}

	store := newStateStore()
	txn := store.db.Txn(true)
	defer txn.Abort()
	indexed := make(map[string]bool, len(want))
	for n := 1; ; n++ {
		rec, err := readDelimited(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrSnapshotCorrupt, n, err)
		}
		if err := restoreRecord(txn, rec, want, indexed); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrSnapshotCorrupt, n, err)
		}
	}
	for _, name := range want {
		if !indexed[name] {
			return nil, fmt.Errorf("%w: stream ends without the index record of table %s (truncated)", ErrSnapshotCorrupt, name)
		}
	}
	txn.Commit()
	return store, nil
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

// restoreRecord stores one record, the encoding of a pb.SnapshotRecord,
// keeping a row's bytes as they are. indexed tracks the index records seen,
// which must come after every row.
func restoreRecord(txn *memdb.Txn, rec []byte, want []string, indexed map[string]bool) error {
	if err := checkWire(snapshotRecordWire, rec); err != nil {
		return err
	}
	var num protowire.Number
	var payload []byte
	fields := 0
	eachField(rec, func(n protowire.Number, typ protowire.Type, v []byte) {
		fields++
		num = n
		if typ == protowire.BytesType {
			payload, _ = protowire.ConsumeBytes(v)
		}
	})
	switch {
	case fields == 0:
		return fmt.Errorf("empty record")
	case fields > 1:
		return fmt.Errorf("record holds %d fields, a record holds one row", fields)
	case payload == nil:
		return fmt.Errorf("record holds no row this version knows")
	}
	if num == snapshotRecordTableIndex {
		ti := &pb.TableIndex{}
		if err := proto.Unmarshal(payload, ti); err != nil {
			return fmt.Errorf("index record: %w", err)
		}
		return restoreIndex(txn, ti, want, indexed)
	}
	if len(indexed) > 0 {
		return fmt.Errorf("row after the index records")
	}
	for _, t := range tables {
		if t.record != num {
			continue
		}
		if !slices.Contains(want, t.name) {
			return fmt.Errorf("row of table %s, which this snapshot version does not have", t.name)
		}
		key := wireString(payload, t.key)
		if key == "" {
			return fmt.Errorf("%s row without a key", t.name)
		}
		if err := txn.Insert(t.name, rawRow(key, payload)); err != nil {
			return fmt.Errorf("storing %s row %q: %w", t.name, key, err)
		}
		return nil
	}
	return fmt.Errorf("record holds no row this version knows")
}

var (
	snapshotRecordWire       = compileWire(snapshotRecordDesc)
	snapshotRecordTableIndex = fieldNumber(snapshotRecordDesc, "table_index")
)

// restoreIndex stores one table's index record.
func restoreIndex(txn *memdb.Txn, ti *pb.TableIndex, want []string, indexed map[string]bool) error {
	name := ti.GetTable()
	if !slices.Contains(want, name) {
		return fmt.Errorf("index record for unknown table %q", name)
	}
	if indexed[name] {
		return fmt.Errorf("second index record for table %s", name)
	}
	indexed[name] = true
	if ti.GetIndex() == 0 {
		// Never written: an absent row means the same, and keeps a
		// restored store identical to the one snapshotted.
		return nil
	}
	if err := txn.Insert(tableIndex, ti); err != nil {
		return fmt.Errorf("storing index of table %s: %w", name, err)
	}
	return nil
}
