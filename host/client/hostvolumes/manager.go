package hostvolumes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/atomicfile"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

var (
	// ErrNameTaken is returned by Create when the node has another
	// volume of the name (static or dynamic): group volumes name them by
	// name, so a node has one of each.
	ErrNameTaken = errcode.New(codes.AlreadyExists, "the node has a host volume of that name")
	// ErrBadVolume is returned by Create and Delete for a request without
	// an ID or name, or with an ID that cannot be a path segment.
	ErrBadVolume = errcode.New(codes.InvalidArgument, "malformed host volume request")
	// ErrNotRecorded is returned when the plugin acted but the node's
	// host_volumes.json could not be written: the outcome is not what the
	// node will restore, so it is uncertain (Aborted): the servers keep
	// their record and the call is to be made again.
	ErrNotRecorded = errcode.New(codes.Aborted, "the node could not record it; call again")
)

// Config configures a Manager.
type Config struct {
	// StateFile is where the volumes made are recorded.
	StateFile string
	// VolumesDir is host_volumes_dir: mkdir's volumes are made in it.
	VolumesDir string
	// PluginDir is host_volume_plugin_dir (may be empty: mkdir only).
	PluginDir string
	NodeID    string
	// Static are the node's static host volumes, whose names a dynamic
	// one may not take.
	Static map[string]*pb.HostVolumeInfo
	// Changed is called after the node's volumes changed (the client
	// registers again, so the servers see them).
	Changed func()
	Logger  hclog.Logger
	// RestoreWait bounds how long Restore waits for the volumes; 0:
	// defaultRestoreWait. RestoreRetry is how often one not restored is
	// tried again; 0: defaultRestoreRetry.
	RestoreWait, RestoreRetry time.Duration
}

// record is one volume the node made, as kept in the state file.
type record struct {
	Volume json.RawMessage `json:"volume"` // pb.HostVolume, protojson
	Path   string          `json:"path"`
	Bytes  int64           `json:"bytes"`
}

// Manager makes and removes the node's dynamic host volumes and knows
// which it has. mu guards only the bookkeeping (vols, busy): a plugin runs
// with it released, so Volumes (the heartbeat's re-registration, a task's
// Prestart) never waits for a plugin. Operations on one volume ID or name
// are serialised by busy.
type Manager struct {
	cfg Config
	// lookup finds a plugin (lookupPlugin; tests replace it).
	lookup func(id string) (Plugin, error)
	mu     sync.Mutex
	// vols are the volumes made, by ID.
	vols map[string]*made
	// busy holds a channel per volume ID ("id:…") and name ("name:…")
	// an operation runs on, closed when it ends.
	busy map[string]chan struct{}
	// saveMu orders the state file's writes.
	saveMu sync.Mutex
	// restoreReturned: Restore returned; a volume restored later is
	// announced (Changed).
	restoreReturned atomic.Bool
}

type made struct {
	vol   *pb.HostVolume
	path  string
	bytes int64
	// restoreFailed: not restored (yet) since the agent started: its
	// plugin is running again, or failed; not advertised until the
	// background retry or a create succeeds.
	restoreFailed bool
	// unknown: the servers do not hold it (Retain); not advertised.
	unknown bool
}

// New loads the volumes a previous run made (Restore makes them again).
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &Manager{cfg: cfg, vols: map[string]*made{}, busy: map[string]chan struct{}{}}
	m.lookup = func(id string) (Plugin, error) { return lookupPlugin(id, cfg.PluginDir, cfg.VolumesDir) }
	data, err := os.ReadFile(cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dynamic host volumes: %w", err)
	}
	var recs []record
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("dynamic host volumes: %s: %w", cfg.StateFile, err)
	}
	for _, r := range recs {
		v := &pb.HostVolume{}
		if err := protojson.Unmarshal(r.Volume, v); err != nil {
			return nil, fmt.Errorf("dynamic host volumes: %s: %w", cfg.StateFile, err)
		}
		m.vols[v.GetId()] = &made{vol: v, path: r.Path, bytes: r.Bytes}
	}
	return m, nil
}

// acquire waits until no operation runs on v's ID or name, and marks both
// busy; release ends that. ctx ends the wait.
func (m *Manager) acquire(ctx context.Context, v *pb.HostVolume) (release func(), err error) {
	keys := []string{"id:" + v.GetId(), "name:" + v.GetName()}
	for {
		m.mu.Lock()
		var wait chan struct{}
		for _, k := range keys {
			if ch, ok := m.busy[k]; ok {
				wait = ch
				break
			}
		}
		if wait == nil {
			ch := make(chan struct{})
			for _, k := range keys {
				m.busy[k] = ch
			}
			m.mu.Unlock()
			return func() {
				m.mu.Lock()
				for _, k := range keys {
					delete(m.busy, k)
				}
				m.mu.Unlock()
				close(ch)
			}, nil
		}
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: waiting for another operation on it: %w", m.describe(v), context.Cause(ctx))
		}
	}
}

// Restore bounds: volumes are made again restoreParallel at a time, and
// Restore waits for them up to Config.RestoreWait (default
// defaultRestoreWait); one not restored by then, or whose plugin failed,
// is retried in the background every Config.RestoreRetry (default
// defaultRestoreRetry) until it is, or it is deleted, or ctx ends.
const (
	restoreParallel     = 4
	defaultRestoreWait  = 15 * time.Second
	defaultRestoreRetry = 30 * time.Second
)

// Restore runs create again for every volume recorded (plugins are
// idempotent), so what a reboot undid (a mount) is made again. Volumes
// are restored in parallel (bounded), and Restore returns once all are
// restored or RestoreWait passed, so a slow plugin does not hold the
// client's start: a volume not restored (yet, or its plugin failed) stays
// recorded but is not advertised (a task must not get a directory its
// plugin did not make ready); it is retried in the background, and once
// restored it is advertised (Changed). Failures and volumes still
// restoring at the deadline are logged and returned. Each plugin run has
// its operation's deadline.
func (m *Manager) Restore(ctx context.Context) error {
	m.mu.Lock()
	ids := slices.Sorted(maps.Keys(m.vols))
	for _, id := range ids {
		m.vols[id].restoreFailed = true // until restored
	}
	m.mu.Unlock()
	wait, retry := m.cfg.RestoreWait, m.cfg.RestoreRetry
	if wait <= 0 {
		wait = defaultRestoreWait
	}
	if retry <= 0 {
		retry = defaultRestoreRetry
	}
	sem := make(chan struct{}, restoreParallel)
	first := make(chan error, len(ids))
	for _, id := range ids {
		go m.restoreLoop(ctx, id, sem, retry, first)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var errs []error
	for left := len(ids); left > 0; left-- {
		select {
		case err := <-first:
			if err != nil {
				errs = append(errs, err)
			}
		case <-timer.C:
			m.cfg.Logger.Warn("dynamic host volumes still restoring; not advertised until restored", "count", left, "waited", wait)
			errs = append(errs, fmt.Errorf("dynamic host volumes: %d not restored within %s: not advertised until they are", left, wait))
			left = 1 // ends the loop
		case <-ctx.Done():
			errs = append(errs, context.Cause(ctx))
			left = 1
		}
	}
	m.restoreReturned.Store(true)
	return errors.Join(errs...)
}

// restoreLoop restores volume id, sending its first attempt's outcome on
// first; a failure is retried every retry until restored, the volume is
// gone, or ctx ends.
func (m *Manager) restoreLoop(ctx context.Context, id string, sem chan struct{}, retry time.Duration, first chan<- error) {
	for attempt := 0; ; attempt++ {
		done, err := m.restoreOnce(ctx, id, sem)
		if attempt == 0 {
			first <- err
		}
		if done || ctx.Err() != nil {
			return
		}
		m.cfg.Logger.Error("restoring a dynamic host volume; not advertised, retrying", "volume_id", id, "in", retry, "error", err)
		t := time.NewTimer(retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// restoreOnce runs create again for volume id; done when it is restored
// or no longer recorded (deleted, or made again by a create meanwhile).
func (m *Manager) restoreOnce(ctx context.Context, id string, sem chan struct{}) (done bool, err error) {
	m.mu.Lock()
	v := m.vols[id]
	m.mu.Unlock()
	if v == nil || !v.restoreFailed {
		return true, nil
	}
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return true, context.Cause(ctx)
	}
	defer func() { <-sem }()
	release, err := m.acquire(ctx, v.vol)
	if err != nil {
		return false, err
	}
	defer release()
	m.mu.Lock()
	cur := m.vols[id]
	m.mu.Unlock()
	if cur == nil || !cur.restoreFailed {
		return true, nil
	}
	res, err := m.run(ctx, cur.vol, OpCreate, "")
	if err != nil {
		return false, err
	}
	m.mu.Lock()
	if c := m.vols[id]; c != nil {
		c.path, c.bytes, c.restoreFailed = res.Path, res.Bytes, false
	}
	m.mu.Unlock()
	if m.restoreReturned.Load() {
		m.changed() // advertised from now on
	}
	return true, nil
}

// Retain stops advertising the volumes whose IDs are not in held (the
// servers' registration answer: a volume forgotten by a delete -force
// while the node was away), logging each once and keeping its data and
// record (an operator removes it by hand); one held again is advertised
// again. Changed is called when what is advertised changed.
func (m *Manager) Retain(held []string) {
	keep := make(map[string]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	changed := false
	m.mu.Lock()
	for id, v := range m.vols {
		switch {
		case !keep[id] && !v.unknown:
			v.unknown, changed = true, true
			m.cfg.Logger.Warn("the servers do not hold this dynamic host volume (deleted with -force?): no longer advertised; its data is kept",
				"volume_id", id, "name", v.vol.GetName(), "path", v.path)
		case keep[id] && v.unknown:
			v.unknown, changed = false, true
		}
	}
	m.mu.Unlock()
	if changed {
		m.changed()
	}
}

// Volumes are the node's dynamic host volumes by name, for its
// fingerprint and the tasks that mount them; one whose restore failed is
// left out.
func (m *Manager) Volumes() map[string]*pb.HostVolumeInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*pb.HostVolumeInfo, len(m.vols))
	for id, v := range m.vols {
		if v.restoreFailed || v.unknown {
			continue
		}
		out[v.vol.GetName()] = &pb.HostVolumeInfo{Path: v.path, Id: id}
	}
	return out
}

// Create makes v on this node with its plugin; a volume made already is
// made again (idempotent) and answered.
func (m *Manager) Create(ctx context.Context, v *pb.HostVolume) (path string, bytes int64, err error) {
	if err := checkVolume(v); err != nil {
		return "", 0, err
	}
	release, err := m.acquire(ctx, v)
	if err != nil {
		return "", 0, err
	}
	defer release()
	m.mu.Lock()
	var forgotten []string
	for id, o := range m.vols {
		if id == v.GetId() || o.vol.GetName() != v.GetName() {
			continue
		}
		if o.unknown {
			// The servers no longer hold it (deleted with -force while
			// this node was away): its record gives way, its data stays
			// at its own path.
			forgotten = append(forgotten, id)
			continue
		}
		m.mu.Unlock()
		return "", 0, fmt.Errorf("%s: %w: dynamic host volume %s", m.describe(v), ErrNameTaken, id)
	}
	for _, id := range forgotten {
		m.cfg.Logger.Warn("forgetting a dynamic host volume the servers no longer hold, for a new volume of its name; its data is kept",
			"volume_id", id, "name", v.GetName(), "path", m.vols[id].path, "new_volume_id", v.GetId())
		delete(m.vols, id)
	}
	prev := m.vols[v.GetId()]
	m.mu.Unlock()
	if len(forgotten) > 0 {
		if err := m.save(); err != nil {
			return "", 0, fmt.Errorf("%s: forgetting dynamic host volume %v: %w", m.describe(v), forgotten, err)
		}
	}
	if _, ok := m.cfg.Static[v.GetName()]; ok && prev == nil {
		return "", 0, fmt.Errorf("%s: %w: a static host_volume of the agent's config", m.describe(v), ErrNameTaken)
	}
	res, err := m.run(ctx, v, OpCreate, "")
	if err != nil {
		return "", 0, err
	}
	m.mu.Lock()
	m.vols[v.GetId()] = &made{vol: proto.CloneOf(v), path: res.Path, bytes: res.Bytes}
	m.mu.Unlock()
	if err := m.save(); err != nil {
		// Not recorded: a restart would not restore it. The servers do
		// not record it either, and ask again.
		m.mu.Lock()
		if prev != nil {
			m.vols[v.GetId()] = prev
		} else {
			delete(m.vols, v.GetId())
		}
		m.mu.Unlock()
		return "", 0, fmt.Errorf("%s: made, but %w: %w", m.describe(v), ErrNotRecorded, err)
	}
	m.changed()
	return res.Path, res.Bytes, nil
}

// Delete removes v with its plugin and forgets it; a volume this node
// does not have is deleted already.
func (m *Manager) Delete(ctx context.Context, v *pb.HostVolume) error {
	if err := checkVolume(v); err != nil {
		return err
	}
	release, err := m.acquire(ctx, v)
	if err != nil {
		return err
	}
	defer release()
	m.mu.Lock()
	have := m.vols[v.GetId()]
	m.mu.Unlock()
	created := v.GetHostPath()
	if have != nil {
		created = have.path
	}
	if _, err := m.run(ctx, v, OpDelete, created); err != nil {
		return err
	}
	if have == nil {
		return nil
	}
	m.mu.Lock()
	delete(m.vols, v.GetId())
	m.mu.Unlock()
	if err := m.save(); err != nil {
		m.mu.Lock()
		m.vols[v.GetId()] = have
		m.mu.Unlock()
		return fmt.Errorf("%s: removed, but %w: %w", m.describe(v), ErrNotRecorded, err)
	}
	m.changed()
	return nil
}

func (m *Manager) changed() {
	if m.cfg.Changed != nil {
		m.cfg.Changed()
	}
}

// describe names a volume, its node and plugin for errors.
func (m *Manager) describe(v *pb.HostVolume) string {
	plugin := v.GetPluginId()
	if plugin == "" {
		plugin = MkdirPluginID
	}
	return fmt.Sprintf("host volume %q (%s) on node %s, plugin %q", v.GetName(), v.GetId(), m.cfg.NodeID, plugin)
}

// run runs one operation of v's plugin.
func (m *Manager) run(ctx context.Context, v *pb.HostVolume, op, created string) (Result, error) {
	p, err := m.lookup(v.GetPluginId())
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", m.describe(v), err)
	}
	req := Request{ID: v.GetId(), Name: v.GetName(), NodeID: m.cfg.NodeID,
		CapacityMin: v.GetRequestedCapacityMinBytes(), CapacityMax: v.GetRequestedCapacityMaxBytes(),
		Parameters: v.GetParameters(), Path: filepath.Join(m.cfg.VolumesDir, v.GetId()), CreatedPath: created}
	if op == OpCreate {
		if err := os.MkdirAll(m.cfg.VolumesDir, 0o711); err != nil {
			return Result{}, fmt.Errorf("%s: host_volumes_dir: %w", m.describe(v), err)
		}
		res, err := p.Create(ctx, req)
		if err != nil {
			return Result{}, fmt.Errorf("%s: create: %w", m.describe(v), err)
		}
		return res, nil
	}
	if err := p.Delete(ctx, req); err != nil {
		return Result{}, fmt.Errorf("%s: delete: %w", m.describe(v), err)
	}
	return Result{}, nil
}

// save writes the records as they are now: a temporary file renamed over
// the last. saveMu orders writers, so the last write holds the newest
// records.
func (m *Manager) save() error {
	m.saveMu.Lock()
	defer m.saveMu.Unlock()
	m.mu.Lock()
	recs := make([]record, 0, len(m.vols))
	for _, id := range slices.Sorted(maps.Keys(m.vols)) {
		v := m.vols[id]
		b, err := protojson.Marshal(v.vol)
		if err != nil {
			m.mu.Unlock()
			return err
		}
		recs = append(recs, record{Volume: b, Path: v.path, Bytes: v.bytes})
	}
	m.mu.Unlock()
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	return atomicfile.Write(m.cfg.StateFile, data)
}

// checkVolume refuses an ID that could leave host_volumes_dir.
func checkVolume(v *pb.HostVolume) error {
	id := v.GetId()
	switch {
	case id == "" || v.GetName() == "":
		return fmt.Errorf("%w: volume ID %q, name %q: both are required", ErrBadVolume, id, v.GetName())
	case id == "." || id == ".." || filepath.Base(id) != id || len(id) > 128:
		return fmt.Errorf("%w: volume ID %q is not one path segment", ErrBadVolume, id)
	}
	return nil
}
