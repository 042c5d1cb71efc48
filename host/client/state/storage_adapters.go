package state

import (
	"fmt"

	"berth.dev/berth/rpc/pb"
)

// PutStorageAdapter stores (or replaces) the record of a storage adapter
// process, keyed by adapter name.
func (db *DB) PutStorageAdapter(rec *pb.StorageAdapterRecord) error {
	if rec.GetName() == "" || rec.GetReattach().GetPid() <= 0 || rec.GetReattach().GetAddress() == "" {
		return fmt.Errorf("%w: storage adapter record needs a name, a pid and an address: %v", ErrInvalidRecord, rec)
	}
	return db.put(bucketStorageAdapters, rec.GetName(), rec)
}

// StorageAdapters returns every storage adapter record, sorted by name.
// Records that do not decode are reported as *RecordError values next to
// the others.
func (db *DB) StorageAdapters() ([]*pb.StorageAdapterRecord, error) {
	return list(db, bucketStorageAdapters, func() *pb.StorageAdapterRecord { return &pb.StorageAdapterRecord{} })
}

// DeleteStorageAdapter removes the record of the storage adapter name.
func (db *DB) DeleteStorageAdapter(name string) error {
	return db.del(bucketStorageAdapters, name)
}
