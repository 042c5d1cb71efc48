package state

import (
	"fmt"

	"berth.dev/berth/rpc/pb"
)

// PutDriverPlugin stores (or replaces) the record of a driver plugin
// process, keyed by driver name.
func (db *DB) PutDriverPlugin(rec *pb.DriverPluginRecord) error {
	if rec.GetName() == "" || rec.GetReattach().GetPid() <= 0 || rec.GetReattach().GetAddress() == "" {
		return fmt.Errorf("%w: driver plugin record needs a name, a pid and an address: %v", ErrInvalidRecord, rec)
	}
	return db.put(bucketDriverPlugins, rec.GetName(), rec)
}

// DriverPlugin returns the record of the driver plugin name, if any.
func (db *DB) DriverPlugin(name string) (*pb.DriverPluginRecord, bool, error) {
	return get(db, bucketDriverPlugins, name, func() *pb.DriverPluginRecord { return &pb.DriverPluginRecord{} })
}

// DriverPlugins returns every driver plugin record, sorted by name. Records
// that do not decode are reported as *RecordError values next to the others.
func (db *DB) DriverPlugins() ([]*pb.DriverPluginRecord, error) {
	return list(db, bucketDriverPlugins, func() *pb.DriverPluginRecord { return &pb.DriverPluginRecord{} })
}

// DeleteDriverPlugin removes the record of the driver plugin name.
func (db *DB) DeleteDriverPlugin(name string) error {
	return db.del(bucketDriverPlugins, name)
}
