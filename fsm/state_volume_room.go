package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// TableVolumeRoom is derived from the claims and attachments tables like
// allocs_freed from the allocs: one pb.TableIndex row per source table
// ("claims", "attachments") whose index is the latest raft index at which
// a row of it was removed, a claim freed or an attachment detached: the
// only changes of the two tables that may give a blocked job room on a
// volume (VolumeRoomIndex). Never in a snapshot, never in the index
// table, rebuilt on restore.
const TableVolumeRoom = "volume_room"

var volumeRoomTable = newTable(TableVolumeRoom, (*pb.TableIndex).GetTable)

// VolumeRoomIndex returns the latest index at which a claim was freed or
// an attachment removed (its row deleted). A claim reserved, readied, in
// use, releasing or node-detached still holds its volume, and an
// attachment attaching, attached or detaching still keeps another node
// from claiming it, so their writes do not move it: the blocked-evaluation
// feed reads this where it read the claims and attachments tables'
// indexes, which every step of a volume's release moved, each waking the
// blocked job for a scheduler run and a plan that blocked again. It adds
// a watch on both rows to ws.
//
// It is a high-water mark like AllocsFreedIndex: a restore cannot tell
// when rows were removed and counts each table's last change instead (an
// upper bound); only the local leader's feed reads it, and a new leader
// wakes every blocked evaluation once whatever it says.
func (r reader) VolumeRoomIndex(ws memdb.WatchSet) (uint64, error) {
	var out uint64
	for _, key := range []string{TableClaims, TableAttachments} {
		row, err := volumeRoomTable.first(r, ws, key)
		if err != nil {
			return 0, err
		}
		out = max(out, row.GetIndex())
	}
	return out, nil
}

// volumeRoom keeps one volume_room row from the rows of table source.
// Each source table derives its own instance; the claims table's declares
// the memdb table.
type volumeRoom[M proto.Message] struct {
	source   string
	declares bool
}

var (
	_ derived[*pb.Claim]      = volumeRoom[*pb.Claim]{}
	_ derived[*pb.Attachment] = volumeRoom[*pb.Attachment]{}
	_ deleteOnlyDerived       = volumeRoom[*pb.Claim]{}
)

func (d volumeRoom[M]) schema() *memdb.TableSchema {
	if !d.declares {
		return nil
	}
	return volumeRoomTable.memdbSchema()
}

func (volumeRoom[M]) derivesOnDeleteOnly() {}

func (d volumeRoom[M]) changed(tx *writeTxn, old, new M) error {
	if !old.ProtoReflect().IsValid() || new.ProtoReflect().IsValid() {
		return nil // an insert or a change: nothing removed
	}
	return tx.insertRow(TableVolumeRoom, encodeKey([]string{d.source}), &pb.TableIndex{Table: d.source, Index: tx.index})
}

func (d volumeRoom[M]) rebuild(txn *memdb.Txn, _ *table[M]) error {
	row, err := txn.First(tableIndex, indexID, d.source)
	if err != nil {
		return fmt.Errorf("reading index of table %s: %w", d.source, err)
	}
	if row == nil {
		return nil
	}
	if err := txn.Insert(TableVolumeRoom, &pb.TableIndex{Table: d.source, Index: row.(*pb.TableIndex).GetIndex()}); err != nil {
		return fmt.Errorf("storing %s: %w", TableVolumeRoom, err)
	}
	return nil
}
