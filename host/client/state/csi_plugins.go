package state

import (
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// csiPluginKey is the key of a dynamic CSI plugin registration:
// "<type>/<alloc id>/<plugin id>". The alloc ID holds no '/' (checked), so
// the plugin ID may hold anything and no two registrations share a key.
func csiPluginKey(rec *pb.CSIPluginRegistration) (string, error) {
	var typ string
	switch rec.GetType() {
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER:
		typ = "controller"
	case pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE:
		typ = "node"
	default:
		return "", fmt.Errorf("%w: csi plugin registration %q of alloc %q has type %s, want controller or node",
			ErrInvalidRecord, rec.GetPluginId(), rec.GetAllocId(), rec.GetType())
	}
	if rec.GetPluginId() == "" || rec.GetAllocId() == "" || strings.Contains(rec.GetAllocId(), "/") {
		return "", fmt.Errorf("%w: csi plugin registration needs a plugin id and an alloc id without '/', got plugin %q, alloc %q",
			ErrInvalidRecord, rec.GetPluginId(), rec.GetAllocId())
	}
	return typ + "/" + rec.GetAllocId() + "/" + rec.GetPluginId(), nil
}

// PutCSIPluginRegistrations stores (or replaces) dynamic CSI plugin
// registrations, keyed by type, alloc ID and plugin ID, in one transaction:
// a monolith's controller and node entries are stored together or not at
// all. Each record must have type controller or node.
func (db *DB) PutCSIPluginRegistrations(recs ...*pb.CSIPluginRegistration) error {
	keys := make([]string, len(recs))
	values := make([][]byte, len(recs))
	for i, rec := range recs {
		key, err := csiPluginKey(rec)
		if err != nil {
			return err
		}
		data, err := proto.Marshal(rec)
		if err != nil {
			return fmt.Errorf("state db: encode %s %q: %w", bucketCSIPlugins, key, err)
		}
		keys[i], values[i] = key, data
	}
	return db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCSIPlugins)
		for i, key := range keys {
			if err := b.Put([]byte(key), values[i]); err != nil {
				return fmt.Errorf("state db: put %s %q: %w", bucketCSIPlugins, key, err)
			}
		}
		return nil
	})
}

// DeleteCSIPluginRegistrations removes the registrations with the key
// fields (type, alloc ID, plugin ID) of recs, in one transaction; a missing
// one is not an error.
func (db *DB) DeleteCSIPluginRegistrations(recs ...*pb.CSIPluginRegistration) error {
	keys := make([]string, len(recs))
	for i, rec := range recs {
		key, err := csiPluginKey(rec)
		if err != nil {
			return err
		}
		keys[i] = key
	}
	return db.bolt.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCSIPlugins)
		for _, key := range keys {
			if err := b.Delete([]byte(key)); err != nil {
				return fmt.Errorf("state db: delete %s %q: %w", bucketCSIPlugins, key, err)
			}
		}
		return nil
	})
}

// CSIPluginRegistrations returns every dynamic CSI plugin registration,
// sorted by key (type, alloc ID, plugin ID). Records that do not decode are
// reported as *RecordError values next to the others.
func (db *DB) CSIPluginRegistrations() ([]*pb.CSIPluginRegistration, error) {
	return list(db, bucketCSIPlugins, func() *pb.CSIPluginRegistration { return &pb.CSIPluginRegistration{} })
}
