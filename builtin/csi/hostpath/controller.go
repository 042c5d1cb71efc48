//go:build linux

package hostpath

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
)

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
	// disk measures the state directory's filesystem: its size and what
	// it has free for the plugin (statfs f_blocks, f_bavail); tests
	// replace it.
	disk func() (fsStats, error)

	mu          sync.RWMutex
	volumes     map[string]*volumeRecord
	volByName   map[string]string
	snapshots   map[string]*snapshotRecord
	snapByName  map[string]string
	groups      map[string]*groupRecord
	groupByName map[string]string
	reserved    int64 // bytes promised to creates and expansions in flight
	// diskReserved is the part of reserved not yet written to the disk:
	// a copy's bytes leave it as soon as they are written, since statfs
	// then counts them.
	diskReserved int64
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
		disk:    func() (fsStats, error) { return statFS(lay.root) },
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
		// A crash during a record update leaves its temporary file.
		if err := removeLeftovers(c.lay.volumeDir(e.Name())); err != nil {
			return fmt.Errorf("clean %s: %w", c.lay.volumeDir(e.Name()), err)
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

// available is the capacity left for new volumes and snapshots: what the
// state directory's filesystem has free, less what operations in flight
// have reserved, and, with a configured capacity, no more than what is
// left of it.
func (c *controller) available() (int64, error) {
	disk, err := c.disk()
	if err != nil {
		return 0, err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	free := disk.availBytes - c.diskReserved
	if c.cfg.Capacity > 0 {
		free = min(free, c.cfg.Capacity-c.usedLocked())
	}
	return max(0, free), nil
}

// maxSize is the largest volume of kind the plugin makes: MaxVolumeSize,
// for a block volume rounded down to whole 512-byte sectors (an image is
// whole sectors, so a size between would be rounded up past the limit).
func (c *controller) maxSize(kind string) int64 {
	if kind == kindBlock {
		return c.cfg.MaxVolumeSize - c.cfg.MaxVolumeSize%512
	}
	return c.cfg.MaxVolumeSize
}

// checkMaxSize refuses a volume size above the plugin's largest volume of
// kind (OutOfRange: the CSI spec's answer to a capacity the plugin does
// not support). what names the volume, for the error text.
func (c *controller) checkMaxSize(what, kind string, size int64) error {
	if limit := c.maxSize(kind); size > limit {
		sectors := ""
		if limit != c.cfg.MaxVolumeSize {
			sectors = fmt.Sprintf(" rounded down to whole 512-byte sectors for a block volume from %d", c.cfg.MaxVolumeSize)
		}
		return errRange("%s: %d bytes (%s) is more than the largest volume this plugin makes, %d bytes (%s, its max_volume_size%s)",
			what, size, humanBytes(size), limit, humanBytes(limit), sectors)
	}
	return nil
}

// reserve sets aside n bytes of capacity for an operation in flight. what
// names the object, for the error text. The bytes must fit in the
// configured capacity (when there is one) and in what the filesystem has
// free now. Earlier volumes are not charged against the filesystem: a
// mount volume is a directory and a block volume a sparse file, so they
// take space only as they are written (thin provisioning); a configured
// capacity is the hard account. More than the plugin's whole capacity or
// the whole filesystem is OutOfRange (it never fits); more than is free
// now, ResourceExhausted.
func (c *controller) reserve(n int64, what string) (*reservation, error) {
	if n <= 0 {
		return &reservation{c: c}, nil
	}
	if c.cfg.Capacity > 0 && n > c.cfg.Capacity {
		return nil, errRange("%s needs %d bytes; the plugin's whole capacity is %d bytes", what, n, c.cfg.Capacity)
	}
	st, err := c.disk()
	if err != nil {
		return nil, errInternal(err, "%s: measure free space in %s", what, c.lay.root)
	}
	if st.totalBytes > 0 && n > st.totalBytes {
		return nil, errRange("%s needs %d bytes (%s), more than the whole filesystem of the plugin's state directory %s, %d bytes (%s)",
			what, n, humanBytes(n), c.lay.root, st.totalBytes, humanBytes(st.totalBytes))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Capacity > 0 {
		if free := c.cfg.Capacity - c.usedLocked(); n > free {
			return nil, errExhausted("%s needs %d bytes but only %d of the plugin's %d bytes are free", what, n, free, c.cfg.Capacity)
		}
	}
	if free := st.availBytes - c.diskReserved; n > free {
		return nil, errExhausted("%s needs %d bytes (%s) but the filesystem of the plugin's state directory %s has only %d bytes (%s) free",
			what, n, humanBytes(n), c.lay.root, max(0, free), humanBytes(max(0, free)))
	}
	c.reserved += n
	c.diskReserved += n
	return &reservation{c: c, n: n, disk: n}, nil
}

// reservation is capacity set aside for an operation in flight. It ends
// either released (the operation failed) or handed over to the object the
// operation made, inside the critical section that makes that object count
// in usedLocked: so its bytes are never counted twice, which would refuse a
// concurrent create that fits, nor not at all.
//
// Its bytes count against the filesystem's free space only until they are
// written (written): from then on statfs counts them, and a group
// snapshot's first members would otherwise count twice against the next.
type reservation struct {
	c    *controller
	n    int64
	disk int64 // of n, not yet written; guarded by c.mu
	done bool  // guarded by c.mu
}

// written says n of the reserved bytes are now on the disk.
func (r *reservation) written(n int64) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	n = min(n, r.disk)
	r.disk -= n
	r.c.diskReserved -= n
}

// release gives the bytes back unless they were handed over; safe to defer.
func (r *reservation) release() {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	r.handOverLocked()
}

// handOverLocked ends the reservation because the object it was for now
// counts by itself. The caller holds c.mu.
func (r *reservation) handOverLocked() {
	if !r.done {
		r.c.reserved -= r.n
		r.c.diskReserved -= r.disk
		r.disk = 0
		r.done = true
	}
}

// putVolume persists rec and makes it the current record, handing over the
// reservations made for its new size.
func (c *controller) putVolume(rec *volumeRecord, reserved ...*reservation) error {
	if err := writeRecord(filepath.Join(c.lay.volumeDir(rec.ID), "volume.json"), rec); err != nil {
		return err
	}
	c.mu.Lock()
	c.volumes[rec.ID] = rec
	for _, r := range reserved {
		r.handOverLocked()
	}
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
	if c.cfg.NoPublish {
		types = slices.DeleteFunc(types, func(t csi.ControllerServiceCapability_RPC_Type) bool {
			return t == csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME || t == csi.ControllerServiceCapability_RPC_PUBLISH_READONLY ||
				t == csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES
		})
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
