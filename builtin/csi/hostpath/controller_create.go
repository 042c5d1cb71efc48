//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
)

// defaultVolumeSize is the capacity of an empty volume created without a
// capacity range, unless the plugin's whole capacity is smaller.
const defaultVolumeSize = 1 << 30

// CreateVolume makes an empty volume, or one with the content of a snapshot
// or another volume. A repeated call with the same name returns the volume
// made by the first if the request is compatible with it.
func (c *controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	name := req.GetName()
	if err := validateName("name", name); err != nil {
		return nil, err
	}
	kind, err := parseCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return nil, errInvalid("volume %q: %v", name, err)
	}
	attrs := attributes{Mode: defaultVolumeMode, UID: -1, GID: -1}
	if kind == kindBlock {
		attrs.Mode = 0 // attributes describe a mount volume's root directory
	}
	if attrs, err = applyParameters(attrs, kind, "parameters", req.GetParameters()); err != nil {
		return nil, errInvalid("volume %q: %v", name, err)
	}
	if attrs, err = applyParameters(attrs, kind, "mutable_parameters", req.GetMutableParameters()); err != nil {
		return nil, errInvalid("volume %q: %v", name, err)
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 || (limit > 0 && limit < required) {
		return nil, errInvalid("volume %q: capacity_range required_bytes=%d limit_bytes=%d is not a valid range", name, required, limit)
	}
	source, err := parseContentSource(req.GetVolumeContentSource())
	if err != nil {
		return nil, errInvalid("volume %q: %v", name, err)
	}

	unlock, err := c.locks.lock(ctx, "volume-name/"+name)
	if err != nil {
		return nil, err
	}
	defer unlock()

	c.mu.RLock()
	existing := c.volumes[c.volByName[name]]
	c.mu.RUnlock()
	if existing != nil {
		if err := compatible(existing, kind, required, limit, req, source); err != nil {
			return nil, err
		}
		return &csi.CreateVolumeResponse{Volume: c.volumeProto(existing)}, nil
	}

	// The source stays locked while it is copied.
	var srcPath string
	var minSize int64
	explicitMode := req.GetParameters()[ParamMode] != "" || req.GetMutableParameters()[ParamMode] != ""
	switch {
	case source == nil:
	case source.SnapshotID != "":
		rel, err := c.locks.lock(ctx, "snapshot/"+source.SnapshotID)
		if err != nil {
			return nil, err
		}
		defer rel()
		s := c.snapshot(source.SnapshotID)
		if s == nil {
			return nil, errNotFound("volume %q: source snapshot %s does not exist", name, source.SnapshotID)
		}
		if s.Kind != kind {
			return nil, errInvalid("volume %q: source snapshot %s holds a %s volume, the request asks for %s access", name, s.ID, s.Kind, kind)
		}
		srcPath, minSize = dataPath(s.dir, s.Kind), s.SizeBytes
	case source.VolumeID != "":
		rel, err := c.locks.lock(ctx, "volume/"+source.VolumeID)
		if err != nil {
			return nil, err
		}
		defer rel()
		v := c.volume(source.VolumeID)
		if v == nil {
			return nil, errNotFound("volume %q: source volume %s does not exist", name, source.VolumeID)
		}
		if v.Kind != kind {
			return nil, errInvalid("volume %q: source volume %s is a %s volume, the request asks for %s access", name, v.ID, v.Kind, kind)
		}
		srcPath, minSize = dataPath(c.lay.volumeDir(v.ID), v.Kind), v.CapacityBytes
	}

	size, err := chooseSize(required, limit, minSize, c.defaultSize(minSize), kind)
	if err != nil {
		return nil, errRange("volume %q: %v", name, err)
	}
	if err := c.checkMaxSize(fmt.Sprintf("volume %q", name), size); err != nil {
		return nil, err
	}
	nodes, err := c.lay.loadNodes()
	if err != nil {
		return nil, errInternal(err, "volume %q: read node registrations", name)
	}
	topo, err := placeVolume(req.GetAccessibilityRequirements(), c.pool, nodes)
	if err != nil {
		return nil, errExhausted("volume %q: %v", name, err)
	}
	res, err := c.reserve(size, fmt.Sprintf("volume %q", name))
	if err != nil {
		return nil, err
	}
	defer res.release()

	rec := &volumeRecord{
		Version: recordVersion, ID: newID(volumePrefix, c.now()), Name: name, Kind: kind,
		CapacityBytes: size, Parameters: copyMap(req.GetParameters()),
		MutableParameters: copyMap(req.GetMutableParameters()),
		Attributes:        attrs, Topology: []map[string]string{topo},
		Source: source, CreatedAt: c.now().UTC(),
	}
	if err := c.materialize(ctx, rec, srcPath, explicitMode); err != nil {
		return nil, errInternal(err, "create volume %q", name)
	}
	c.mu.Lock()
	c.volumes[rec.ID] = rec
	c.volByName[name] = rec.ID
	res.handOverLocked()
	c.mu.Unlock()
	c.log.Info("volume created", "volume", rec.ID, "name", name, "kind", kind, "capacity", size, "source", source)
	return &csi.CreateVolumeResponse{Volume: c.volumeProto(rec)}, nil
}

// materialize builds the volume's directory under a temporary name and
// renames it into place once content and record are on disk.
func (c *controller) materialize(ctx context.Context, rec *volumeRecord, srcPath string, explicitMode bool) (err error) {
	tmp := filepath.Join(c.lay.volumesDir(), tmpPrefix+rec.ID)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	data := dataPath(tmp, rec.Kind)
	switch {
	case rec.Kind == kindBlock && srcPath != "":
		if err := copyFile(ctx, srcPath, data, 0o600); err != nil {
			return err
		}
		if err := os.Truncate(data, rec.CapacityBytes); err != nil {
			return err
		}
	case rec.Kind == kindBlock:
		if err := createImage(data, rec.CapacityBytes); err != nil {
			return err
		}
	case srcPath != "":
		if err := copyTree(ctx, srcPath, data); err != nil {
			return err
		}
		if !explicitMode {
			var st unix.Stat_t
			if err := unix.Stat(data, &st); err != nil {
				return err
			}
			rec.Attributes.Mode = st.Mode & 0o7777
		}
		if err := applyAttributes(data, rec.Attributes); err != nil {
			return err
		}
	default:
		if err := os.Mkdir(data, 0o700); err != nil {
			return err
		}
		if err := applyAttributes(data, rec.Attributes); err != nil {
			return err
		}
	}
	if err := writeRecord(filepath.Join(tmp, "volume.json"), rec); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.lay.volumeDir(rec.ID)); err != nil {
		return err
	}
	return syncDir(c.lay.volumesDir())
}

func createImage(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// applyAttributes sets the root of a mount volume to the requested owner and
// permissions (chown first: it clears setuid bits).
func applyAttributes(dir string, a attributes) error {
	if a.UID >= 0 || a.GID >= 0 {
		if err := os.Lchown(dir, a.UID, a.GID); err != nil {
			return err
		}
	}
	return unix.Chmod(dir, a.Mode)
}

func parseContentSource(src *csi.VolumeContentSource) (*contentSource, error) {
	if src == nil {
		return nil, nil
	}
	switch t := src.GetType().(type) {
	case *csi.VolumeContentSource_Snapshot:
		id := t.Snapshot.GetSnapshotId()
		if id == "" {
			return nil, errors.New("volume_content_source.snapshot.snapshot_id is missing")
		}
		return &contentSource{SnapshotID: id}, nil
	case *csi.VolumeContentSource_Volume:
		id := t.Volume.GetVolumeId()
		if id == "" {
			return nil, errors.New("volume_content_source.volume.volume_id is missing")
		}
		return &contentSource{VolumeID: id}, nil
	}
	return nil, errors.New("volume_content_source has neither a snapshot nor a volume")
}

// defaultSize is the capacity of a volume created without a required size:
// its source's, or 1GiB (at most the plugin's capacity) for an empty volume.
func (c *controller) defaultSize(sourceSize int64) int64 {
	if sourceSize > 0 {
		return sourceSize
	}
	if c.cfg.Capacity > 0 && c.cfg.Capacity < defaultVolumeSize {
		return c.cfg.Capacity
	}
	return defaultVolumeSize
}

// chooseSize picks a volume's capacity within [required, limit], no smaller
// than its source (minSize); block images are whole 512-byte sectors.
func chooseSize(required, limit, minSize, defaultSize int64, kind string) (int64, error) {
	size := required
	if size == 0 {
		size = defaultSize
		if limit > 0 && limit < size {
			size = limit
		}
	}
	if size < minSize {
		size = minSize
	}
	if kind == kindBlock && size%512 != 0 {
		size += 512 - size%512
	}
	if limit > 0 && size > limit {
		if minSize > limit {
			return 0, fmt.Errorf("the source holds %d bytes, more than limit_bytes %d", minSize, limit)
		}
		return 0, fmt.Errorf("block volumes are whole 512-byte sectors; %d bytes exceeds limit_bytes %d", size, limit)
	}
	if size <= 0 {
		return 0, fmt.Errorf("capacity_range allows no positive size")
	}
	return size, nil
}

// compatible checks a repeated CreateVolume against the volume the name
// already has.
func compatible(v *volumeRecord, kind string, required, limit int64, req *csi.CreateVolumeRequest, source *contentSource) error {
	var diffs []string
	if v.Kind != kind {
		diffs = append(diffs, fmt.Sprintf("it is a %s volume, not %s", v.Kind, kind))
	}
	if v.CapacityBytes < required || (limit > 0 && v.CapacityBytes > limit) {
		diffs = append(diffs, fmt.Sprintf("its capacity %d bytes is outside required_bytes=%d limit_bytes=%d", v.CapacityBytes, required, limit))
	}
	if !equalMaps(v.Parameters, req.GetParameters()) {
		diffs = append(diffs, "it was created with other parameters")
	}
	if !equalMaps(v.MutableParameters, req.GetMutableParameters()) {
		diffs = append(diffs, "it was created with other mutable_parameters")
	}
	if (v.Source == nil) != (source == nil) || (source != nil && *v.Source != *source) {
		diffs = append(diffs, "it was created from another content source")
	}
	if !satisfies(v.Topology, req.GetAccessibilityRequirements()) {
		diffs = append(diffs, "it lies outside the requested topology")
	}
	if len(diffs) > 0 {
		return errExists("volume %q already exists as %s but %s", v.Name, v.ID, strings.Join(diffs, "; "))
	}
	return nil
}

func (s *contentSource) String() string {
	switch {
	case s == nil:
		return "none"
	case s.SnapshotID != "":
		return "snapshot " + s.SnapshotID
	}
	return "volume " + s.VolumeID
}
