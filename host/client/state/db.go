package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/rpc/errcode"
)

// SchemaVersion is the layout version this package reads and writes.
const SchemaVersion uint32 = 1

// Bucket names.
var (
	bucketMeta          = []byte("meta")
	bucketDriverPlugins = []byte("driver_plugins")
	bucketTaskHandles   = []byte("task_handles")
	bucketAllocs        = []byte("allocs")
	bucketTaskStates    = []byte("task_states")
	bucketCSIPlugins    = []byte("csi_plugins")
	// bucketStorageAdapters holds StorageAdapterRecord by adapter name.
	bucketStorageAdapters = []byte("storage_adapters")
	// bucketCSIVolumes holds VolumeUsageRecord by volume ID.
	bucketCSIVolumes = []byte("csi_volumes")
	// bucketCSIVolumeReports holds VolumeReportRecord by "<user>/<volume>".
	bucketCSIVolumeReports = []byte("csi_volume_reports")

	keySchemaVersion = []byte("schema_version")
)

// lockTimeout is how long Open waits for another process's lock on the file.
const lockTimeout = 2 * time.Second

var (
	// ErrLocked is returned by Open when another process (another agent on
	// the same data dir) holds the state DB.
	ErrLocked = errcode.New(codes.FailedPrecondition, "state db is locked by another process")
	// ErrNewerSchema is returned by Open when the file was written by a
	// newer berth with a layout this one does not know.
	ErrNewerSchema = errcode.New(codes.FailedPrecondition, "state db was written by a newer berth")
	// ErrInvalidRecord is returned by the Put methods for a record missing
	// its key fields.
	ErrInvalidRecord = errcode.New(codes.InvalidArgument, "invalid state record")
)

// DB is an open client state DB.
type DB struct {
	bolt *bolt.DB
	path string
}

// Path returns the file name of the state DB in a client data dir.
func Path(dataDir string) string { return filepath.Join(dataDir, "client", "state.db") }

// Option changes how Open opens the state DB.
type Option func(*bolt.Options)

// WithoutSync skips the fsync of each commit: for a state DB in a data dir
// that does not outlive the agent (a dev agent's temporary one), which no
// restart ever reads, so durability buys nothing and costs each write.
func WithoutSync() Option { return func(o *bolt.Options) { o.NoSync = true } }

// Open opens (creating if needed) the state DB at path and brings its
// layout up to SchemaVersion.
func Open(path string, opts ...Option) (*DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("state db: %w", err)
	}
	bo := &bolt.Options{Timeout: lockTimeout}
	for _, o := range opts {
		o(bo)
	}
	b, err := bolt.Open(path, 0o600, bo)
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("state db %s: %w (is another agent running with this data dir?)", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("state db %s: %w", path, err)
	}
	db := &DB{bolt: b, path: path}
	if err := db.init(); err != nil {
		b.Close()
		return nil, err
	}
	return db, nil
}

// init creates the buckets and checks or records the schema version.
func (db *DB) init() error {
	return db.bolt.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch raw := meta.Get(keySchemaVersion); {
		case raw == nil:
			var v [4]byte
			binary.BigEndian.PutUint32(v[:], SchemaVersion)
			if err := meta.Put(keySchemaVersion, v[:]); err != nil {
				return err
			}
		case len(raw) != 4:
			return fmt.Errorf("state db %s: schema version is %d bytes, want 4: %w", db.path, len(raw), ErrInvalidRecord)
		case binary.BigEndian.Uint32(raw) > SchemaVersion:
			return fmt.Errorf("state db %s: schema version %d, this berth reads up to %d: %w",
				db.path, binary.BigEndian.Uint32(raw), SchemaVersion, ErrNewerSchema)
		}
		for _, name := range [][]byte{bucketDriverPlugins, bucketTaskHandles, bucketAllocs, bucketTaskStates, bucketCSIPlugins, bucketStorageAdapters, bucketCSIVolumes, bucketCSIVolumeReports} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("state db %s: bucket %s: %w", db.path, name, err)
			}
		}
		return nil
	})
}

// Path returns the DB's file name.
func (db *DB) Path() string { return db.path }

// Close releases the file.
func (db *DB) Close() error { return db.bolt.Close() }

// Synced reports whether each commit is fsynced (false: opened WithoutSync).
func (db *DB) Synced() bool { return !db.bolt.NoSync }
