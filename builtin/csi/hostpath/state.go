package hostpath

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The state directory holds everything the plugin knows; nothing lives only in
// memory. Objects are directories created under a ".tmp-" name and renamed into
// place once complete, and deleted by renaming them into trash/ first, so a
// crash leaves either the whole object or none of it:
//
//	pool                              the pool ID (topology), created once
//	controller.lock                   held by the one controller of this state dir
//	volumes/<vol-id>/volume.json      volume record, attachments included
//	volumes/<vol-id>/data/            a mount volume's content
//	volumes/<vol-id>/disk.img         a block volume's (sparse) image
//	snapshots/<snap-id>/snapshot.json + data/ or disk.img
//	groups/<group-id>/group.json      a group snapshot, its snapshots inside:
//	groups/<group-id>/snapshots/<snap-id>/...
//	nodes/<node-id>/node.json         a node's registration (topology, max volumes)
//	nodes/<node-id>/node.lock         held by the node plugin serving that ID
//	nodes/<node-id>/volumes/<vol-id>.json   what that node staged and published
//	trash/                            objects being deleted
const (
	recordVersion = 1
	tmpPrefix     = ".tmp-"

	kindMount = "mount"
	kindBlock = "block"
)

type layout struct{ root string }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.root}, elem...)...)
}

func (l layout) volumesDir() string         { return l.path("volumes") }
func (l layout) volumeDir(id string) string { return l.path("volumes", id) }
func (l layout) snapshotsDir() string       { return l.path("snapshots") }
func (l layout) groupsDir() string          { return l.path("groups") }
func (l layout) groupDir(id string) string  { return l.path("groups", id) }
func (l layout) nodesDir() string           { return l.path("nodes") }
func (l layout) nodeDir(id string) string   { return l.path("nodes", id) }
func (l layout) trashDir() string           { return l.path("trash") }

func (l layout) nodeVolumesDir(nodeID string) string { return l.path("nodes", nodeID, "volumes") }
func (l layout) nodeVolumeFile(nodeID, volID string) string {
	return l.path("nodes", nodeID, "volumes", volID+".json")
}

// dataPath is where an object's content lives inside its directory.
func dataPath(objDir, kind string) string {
	if kind == kindBlock {
		return filepath.Join(objDir, "disk.img")
	}
	return filepath.Join(objDir, "data")
}

// volumeRecord is a volume as persisted in volumes/<id>/volume.json.
type volumeRecord struct {
	Version       int    `json:"version"`
	ID            string `json:"id"`
	Name          string `json:"name"`
	Kind          string `json:"kind"`
	CapacityBytes int64  `json:"capacity_bytes"`
	// Parameters and MutableParameters are kept as given at creation, to
	// answer a repeated CreateVolume; Attributes are the values in force.
	Parameters        map[string]string      `json:"parameters,omitempty"`
	MutableParameters map[string]string      `json:"mutable_parameters,omitempty"`
	Attributes        attributes             `json:"attributes"`
	Topology          []map[string]string    `json:"topology"`
	Source            *contentSource         `json:"source,omitempty"`
	CreatedAt         time.Time              `json:"created_at"`
	Attachments       map[string]*attachment `json:"attachments,omitempty"`
}

type contentSource struct {
	SnapshotID string `json:"snapshot_id,omitempty"`
	VolumeID   string `json:"volume_id,omitempty"`
}

// attachment is a ControllerPublishVolume that has not been undone.
type attachment struct {
	Capability json.RawMessage `json:"capability"` // protojson of the csi.VolumeCapability
	ReadOnly   bool            `json:"readonly"`
	AttachedAt time.Time       `json:"attached_at"`
}

// snapshotRecord is a snapshot as persisted in snapshot.json.
type snapshotRecord struct {
	Version        int               `json:"version"`
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	SourceVolumeID string            `json:"source_volume_id"`
	GroupID        string            `json:"group_id,omitempty"`
	Kind           string            `json:"kind"`
	SizeBytes      int64             `json:"size_bytes"` // the source volume's capacity
	UsedBytes      int64             `json:"used_bytes"` // space the copy takes, counted against capacity
	Parameters     map[string]string `json:"parameters,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`

	dir string // where the snapshot lives; not persisted
}

// groupRecord is a group snapshot as persisted in groups/<id>/group.json.
type groupRecord struct {
	Version         int               `json:"version"`
	ID              string            `json:"id"`
	Name            string            `json:"name"`
	SourceVolumeIDs []string          `json:"source_volume_ids"`
	SnapshotIDs     []string          `json:"snapshot_ids"`
	Parameters      map[string]string `json:"parameters,omitempty"`
	CreatedAt       time.Time         `json:"created_at"`
}

// nodeRecord registers a node plugin, so the controller can tell known nodes
// from unknown ones and enforce their topology and volume limits.
type nodeRecord struct {
	Version    int               `json:"version"`
	NodeID     string            `json:"node_id"`
	Topology   map[string]string `json:"topology"`
	MaxVolumes int64             `json:"max_volumes"`
	StartedAt  time.Time         `json:"started_at"`
}

// nodeVolumeRecord is what one node did with one volume: where it is staged
// and where it is published.
type nodeVolumeRecord struct {
	Version         int                      `json:"version"`
	VolumeID        string                   `json:"volume_id"`
	Kind            string                   `json:"kind"`
	StagingPath     string                   `json:"staging_path"`
	StageCapability json.RawMessage          `json:"stage_capability"`
	StageReadOnly   bool                     `json:"stage_readonly"`
	LoopDevice      string                   `json:"loop_device,omitempty"`
	Targets         map[string]*targetRecord `json:"targets,omitempty"`
	// CapacityBytes is a mount volume's size as this node's file system
	// sees it: the volume's when staged, grown by NodeExpandVolume after
	// ControllerExpandVolume (as a block device's file system grows only
	// when the node resizes it). NodeGetVolumeStats reports it. 0 (a
	// record of an older plugin): the volume's.
	CapacityBytes int64 `json:"capacity_bytes,omitempty"`
}

type targetRecord struct {
	Capability json.RawMessage `json:"capability"`
	ReadOnly   bool            `json:"readonly"`
	// LoopDevice is a read-only loop device made for this target alone,
	// when a block volume staged writable is published read-only.
	LoopDevice string `json:"loop_device,omitempty"`
}

// writeFileAtomic replaces path with data so that a crash leaves either the
// old or the new content: write a temporary file, fsync it, rename it over
// path, fsync the directory.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tmpPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func writeRecord(path string, rec any) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// RecordError is returned when a record file in the state directory cannot be
// read: it names the file, so an operator can repair or remove it.
type RecordError struct {
	Path string
	Err  error
}

func (e *RecordError) Error() string { return fmt.Sprintf("state record %s: %v", e.Path, e.Err) }
func (e *RecordError) Unwrap() error { return e.Err }

// readRecord decodes a record file. A missing file is reported as
// fs.ErrNotExist (unwrapped, for errors.Is); anything else as *RecordError.
func readRecord(path string, rec any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fs.ErrNotExist
		}
		return &RecordError{Path: path, Err: err}
	}
	return decodeRecord(path, data, rec)
}

func decodeRecord(path string, data []byte, rec any) error {
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return &RecordError{Path: path, Err: err}
	}
	if head.Version != recordVersion {
		return &RecordError{Path: path, Err: fmt.Errorf("format version %d, this plugin reads version %d", head.Version, recordVersion)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(rec); err != nil {
		return &RecordError{Path: path, Err: err}
	}
	return nil
}

// removeLeftovers deletes what a crash left behind in dir: objects and record
// files still under their temporary names.
func removeLeftovers(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// moveToTrash renames dir into the trash (atomically removing the object),
// then deletes it. A failure after the rename only leaves garbage that the
// next start removes.
func (l layout) moveToTrash(dir string) error {
	dst := filepath.Join(l.trashDir(), filepath.Base(dir)+"-"+randHex(4))
	if err := os.Rename(dir, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	return os.RemoveAll(dst)
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("hostpath: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// ensureLayout creates the state directory's skeleton.
func (l layout) ensureLayout() error {
	for _, d := range []string{l.root, l.volumesDir(), l.snapshotsDir(), l.groupsDir(), l.nodesDir(), l.trashDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}

var poolIDPattern = segNamePattern

// poolID returns the state directory's pool ID, creating it on first use.
// Creation links a complete temporary file to the final name, so two
// processes starting at once agree on one ID.
func (l layout) poolID() (string, error) {
	path := l.path("pool")
	for range 2 {
		data, err := os.ReadFile(path)
		if err == nil {
			id := strings.TrimSpace(string(data))
			if !poolIDPattern().MatchString(id) {
				return "", &RecordError{Path: path, Err: fmt.Errorf("pool ID %q is malformed", id)}
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		tmp := l.path(tmpPrefix + "pool-" + randHex(4))
		if err := os.WriteFile(tmp, []byte(randHex(8)+"\n"), 0o600); err != nil {
			return "", err
		}
		f, err := os.Open(tmp)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err == nil {
			err = os.Link(tmp, path)
		}
		os.Remove(tmp)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		if err := syncDir(l.root); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("pool ID file %s keeps disappearing", path)
}
