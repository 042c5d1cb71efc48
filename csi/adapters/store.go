package adapters

import "berth.dev/berth/rpc/pb"

// Store keeps the reattach records of running adapter processes, so that
// a restarted client reconnects to them instead of starting others. The
// client state DB (host/client/state) implements it.
type Store interface {
	// StorageAdapters returns every record; records that could not be
	// read are reported in the error next to the good ones.
	StorageAdapters() ([]*pb.StorageAdapterRecord, error)
	PutStorageAdapter(*pb.StorageAdapterRecord) error
	DeleteStorageAdapter(name string) error
}
