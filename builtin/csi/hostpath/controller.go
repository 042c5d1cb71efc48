//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// defaultVolumeSize is the capacity of a volume created without a capacity
// range.
const defaultVolumeSize = 1 << 30

// controller serves the CSI controller and group controller services over
// the volumes, snapshots and group snapshots of one state directory.
//
// Records in the maps are never modified in place: an update persists a
// changed copy and then swaps the pointer, so readers holding mu for reading
// see consistent records. Operations on one object are serialized through
// locks; mu only guards the maps and the capacity reservations.
type controller struct {
	csi.UnimplementedControllerServer

	cfg   runtimeConfig
	lay   layout
	pool  string
	log   hclog.Logger
	locks *keyedLocks
	now   func() time.Time
	flock *fileLock

	mu          sync.RWMutex
	volumes     map[string]*volumeRecord
	volByName   map[string]string
	snapshots   map[string]*snapshotRecord
	snapByName  map[string]string
	groups      map[string]*groupRecord
	groupByName map[string]string
	reserved    int64 // bytes promised to creates and expansions in flight
}

var _ csi.ControllerServer = (*controller)(nil)

func newController(cfg runtimeConfig, lay layout, pool string, locks *keyedLocks) (*controller, error) {
	flock, err := acquireFileLock(lay.path("controller.lock"), "a controller already serves "+lay.root)
	if err != nil {
		return nil, err
	}
	c := &controller{
		cfg: cfg, lay: lay, pool: pool, log: cfg.Logger.Named("controller"),
		locks: locks, now: time.Now, flock: flock,
		volumes: map[string]*volumeRecord{}, volByName: map[string]string{},
		snapshots: map[string]*snapshotRecord{}, snapByName: map[string]string{},
		groups: map[string]*groupRecord{}, groupByName: map[string]string{},
	}
	if err := c.load(); err != nil {
		flock.release()
		return nil, err
	}
	return c, nil
}

func (c *controller) close() { c.flock.release() }

// load removes what a crash left half-done and reads every record.
func (c *controller) load() error {
	for _, d := range []string{c.lay.volumesDir(), c.lay.snapshotsDir(), c.lay.groupsDir()} {
		if err := removeLeftovers(d); err != nil {
			return fmt.Errorf("clean %s: %w", d, err)
		}
	}
	trash, err := os.ReadDir(c.lay.trashDir())
	if err != nil {
		return err
	}
	for _, e := range trash {
		if err := os.RemoveAll(filepath.Join(c.lay.trashDir(), e.Name())); err != nil {
			return fmt.Errorf("empty trash: %w", err)
		}
	}

	entries, err := os.ReadDir(c.lay.volumesDir())
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !validID(volumePrefix, e.Name()) {
			c.log.Warn("ignoring unexpected entry in volumes directory", "name", e.Name())
			continue
		}
		rec := &volumeRecord{}
		if err := readRecord(filepath.Join(c.lay.volumeDir(e.Name()), "volume.json"), rec); err != nil {
			return err
		}
		c.volumes[rec.ID] = rec
		c.volByName[rec.Name] = rec.ID
	}
	if err := c.loadSnapshots(c.lay.snapshotsDir()); err != nil {
		return err
	}
	groups, err := os.ReadDir(c.lay.groupsDir())
	if err != nil {
		return err
	}
	for _, e := range groups {
		if !validID(groupPrefix, e.Name()) {
			c.log.Warn("ignoring unexpected entry in groups directory", "name", e.Name())
			continue
		}
		g := &groupRecord{}
		if err := readRecord(filepath.Join(c.lay.groupDir(e.Name()), "group.json"), g); err != nil {
			return err
		}
		c.groups[g.ID] = g
		c.groupByName[g.Name] = g.ID
		if err := c.loadSnapshots(filepath.Join(c.lay.groupDir(g.ID), "snapshots")); err != nil {
			return err
		}
	}
	c.log.Info("controller state loaded", "state_dir", c.lay.root, "pool", c.pool,
		"volumes", len(c.volumes), "snapshots", len(c.snapshots), "group_snapshots", len(c.groups))
	return nil
}

func (c *controller) loadSnapshots(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !validID(snapshotPrefix, e.Name()) {
			c.log.Warn("ignoring unexpected entry in snapshots directory", "dir", dir, "name", e.Name())
			continue
		}
		s := &snapshotRecord{}
		if err := readRecord(filepath.Join(dir, e.Name(), "snapshot.json"), s); err != nil {
			return err
		}
		s.dir = filepath.Join(dir, e.Name())
		c.snapshots[s.ID] = s
		if s.GroupID == "" {
			c.snapByName[s.Name] = s.ID
		}
	}
	return nil
}

func (c *controller) volume(id string) *volumeRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.volumes[id]
}

func (c *controller) snapshot(id string) *snapshotRecord {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.snapshots[id]
}

// used is the capacity taken by volumes, snapshot copies and reservations.
// Call with mu held.
func (c *controller) usedLocked() int64 {
	n := c.reserved
	for _, v := range c.volumes {
		n += v.CapacityBytes
	}
	for _, s := range c.snapshots {
		n += s.UsedBytes
	}
	return n
}

// available is the capacity left for new volumes and snapshots: the
// configured capacity minus what is taken, or, with no configured capacity,
// what the state directory's filesystem has free.
func (c *controller) available() (int64, error) {
	if c.cfg.Capacity == 0 {
		st, err := statFS(c.lay.root)
		if err != nil {
			return 0, err
		}
		return st.availBytes, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return max(0, c.cfg.Capacity-c.usedLocked()), nil
}

// reserve sets aside n bytes of capacity for an operation in flight and
// returns the function that gives them back. what names the object, for the
// error text.
func (c *controller) reserve(n int64, what string) (func(), error) {
	if c.cfg.Capacity == 0 || n <= 0 {
		return func() {}, nil
	}
	if n > c.cfg.Capacity {
		return nil, errRange("%s needs %d bytes; the plugin's whole capacity is %d bytes", what, n, c.cfg.Capacity)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if free := c.cfg.Capacity - c.usedLocked(); n > free {
		return nil, errExhausted("%s needs %d bytes but only %d of the plugin's %d bytes are free", what, n, free, c.cfg.Capacity)
	}
	c.reserved += n
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.reserved -= n
			c.mu.Unlock()
		})
	}, nil
}

// putVolume persists rec and makes it the current record.
func (c *controller) putVolume(rec *volumeRecord) error {
	if err := writeRecord(filepath.Join(c.lay.volumeDir(rec.ID), "volume.json"), rec); err != nil {
		return err
	}
	c.mu.Lock()
	c.volumes[rec.ID] = rec
	c.mu.Unlock()
	return nil
}

func (r *volumeRecord) clone() *volumeRecord {
	cp := *r
	cp.Parameters = copyMap(r.Parameters)
	cp.MutableParameters = copyMap(r.MutableParameters)
	cp.Topology = make([]map[string]string, len(r.Topology))
	for i, t := range r.Topology {
		cp.Topology[i] = copyMap(t)
	}
	if r.Source != nil {
		s := *r.Source
		cp.Source = &s
	}
	cp.Attachments = make(map[string]*attachment, len(r.Attachments))
	for k, a := range r.Attachments {
		ac := *a
		cp.Attachments[k] = &ac
	}
	return &cp
}

func (r *volumeRecord) publishedNodes() []string {
	nodes := make([]string, 0, len(r.Attachments))
	for n := range r.Attachments {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}

func (c *controller) volumeProto(r *volumeRecord) *csi.Volume {
	v := &csi.Volume{
		VolumeId:           r.ID,
		CapacityBytes:      r.CapacityBytes,
		AccessibleTopology: toCSITopologies(r.Topology),
	}
	switch {
	case r.Source == nil:
	case r.Source.SnapshotID != "":
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: r.Source.SnapshotID}}}
	case r.Source.VolumeID != "":
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: r.Source.VolumeID}}}
	}
	return v
}

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

	size, err := chooseSize(required, limit, minSize, kind)
	if err != nil {
		return nil, errRange("volume %q: %v", name, err)
	}
	nodes, err := c.lay.loadNodes()
	if err != nil {
		return nil, errInternal(err, "volume %q: read node registrations", name)
	}
	topo, err := placeVolume(req.GetAccessibilityRequirements(), c.pool, nodes)
	if err != nil {
		return nil, errExhausted("volume %q: %v", name, err)
	}
	release, err := c.reserve(size, fmt.Sprintf("volume %q", name))
	if err != nil {
		return nil, err
	}
	defer release()

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

// chooseSize picks a volume's capacity within [required, limit], no smaller
// than its source (minSize); block images are whole 512-byte sectors.
func chooseSize(required, limit, minSize int64, kind string) (int64, error) {
	size := required
	if size == 0 {
		size = defaultVolumeSize
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

// DeleteVolume removes a volume and its content. Snapshots are copies and
// survive it; a volume still published to a node is refused.
func (c *controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, errInvalid("volume_id is missing")
	}
	if !validID(volumePrefix, id) {
		return &csi.DeleteVolumeResponse{}, nil // never existed
	}
	unlock, err := c.locks.lock(ctx, "volume/"+id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	v := c.volume(id)
	if v == nil {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if len(v.Attachments) > 0 {
		return nil, errPrecondition("volume %s (%q) is still published to node(s) %s; ControllerUnpublishVolume it first",
			id, v.Name, strings.Join(v.publishedNodes(), ", "))
	}
	if err := c.lay.moveToTrash(c.lay.volumeDir(id)); err != nil {
		return nil, errInternal(err, "delete volume %s", id)
	}
	c.mu.Lock()
	delete(c.volumes, id)
	if c.volByName[v.Name] == id {
		delete(c.volByName, v.Name)
	}
	c.mu.Unlock()
	c.log.Info("volume deleted", "volume", id, "name", v.Name)
	return &csi.DeleteVolumeResponse{}, nil
}

// errNodeUnknown tells which node was not found and why it might be.
func (c *controller) errNodeUnknown(volID, nodeID string) error {
	return errNotFound("volume %s: node %q is unknown: no hostpath node plugin with that ID has registered in state directory %s", volID, nodeID, c.lay.root)
}

// ControllerGetCapabilities lists the controller RPCs this plugin serves.
func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES,
		csi.ControllerServiceCapability_RPC_GET_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
		csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	}
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, t := range types {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}},
		})
	}
	return resp, nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
