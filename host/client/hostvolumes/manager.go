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

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

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
}

// record is one volume the node made, as kept in the state file.
type record struct {
	Volume json.RawMessage `json:"volume"` // pb.HostVolume, protojson
	Path   string          `json:"path"`
	Bytes  int64           `json:"bytes"`
}

// Manager makes and removes the node's dynamic host volumes and knows
// which it has.
type Manager struct {
	cfg Config
	mu  sync.Mutex
	// vols are the volumes made, by ID.
	vols map[string]*made
}

type made struct {
	vol   *pb.HostVolume
	path  string
	bytes int64
}

// New loads the volumes a previous run made (Restore makes them again).
func New(cfg Config) (*Manager, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &Manager{cfg: cfg, vols: map[string]*made{}}
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

// Restore runs create again for every volume recorded (plugins are
// idempotent), so what a reboot undid (a mount) is made again; a volume
// whose plugin fails stays recorded and fingerprinted at its path, and
// the failure is logged and returned.
func (m *Manager) Restore(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(m.vols)) {
		v := m.vols[id]
		res, err := m.run(ctx, v.vol, OpCreate, "")
		if err != nil {
			m.cfg.Logger.Error("restoring a dynamic host volume", "volume_id", id, "name", v.vol.GetName(), "error", err)
			errs = append(errs, err)
			continue
		}
		v.path, v.bytes = res.Path, res.Bytes
	}
	return errors.Join(errs...)
}

// Volumes are the node's dynamic host volumes by name, for its
// fingerprint and the tasks that mount them.
func (m *Manager) Volumes() map[string]*pb.HostVolumeInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*pb.HostVolumeInfo, len(m.vols))
	for id, v := range m.vols {
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
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cfg.Static[v.GetName()]; ok {
		return "", 0, fmt.Errorf("%s: %w: a static host_volume of the agent's config", m.describe(v), ErrNameTaken)
	}
	for id, o := range m.vols {
		if id != v.GetId() && o.vol.GetName() == v.GetName() {
			return "", 0, fmt.Errorf("%s: %w: dynamic host volume %s", m.describe(v), ErrNameTaken, id)
		}
	}
	res, err := m.run(ctx, v, OpCreate, "")
	if err != nil {
		return "", 0, err
	}
	m.vols[v.GetId()] = &made{vol: proto.CloneOf(v), path: res.Path, bytes: res.Bytes}
	if err := m.save(); err != nil {
		// Not recorded: a restart would not restore it. The servers do
		// not record it either, and ask again.
		delete(m.vols, v.GetId())
		return "", 0, fmt.Errorf("%s: recording it: %w", m.describe(v), err)
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
	m.mu.Lock()
	defer m.mu.Unlock()
	have := m.vols[v.GetId()]
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
	delete(m.vols, v.GetId())
	if err := m.save(); err != nil {
		m.vols[v.GetId()] = have
		return fmt.Errorf("%s: forgetting it: %w", m.describe(v), err)
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
	p, err := lookupPlugin(v.GetPluginId(), m.cfg.PluginDir, m.cfg.VolumesDir)
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

// save writes the records: a temporary file renamed over the last.
func (m *Manager) save() error {
	recs := make([]record, 0, len(m.vols))
	for _, id := range slices.Sorted(maps.Keys(m.vols)) {
		v := m.vols[id]
		b, err := protojson.Marshal(v.vol)
		if err != nil {
			return err
		}
		recs = append(recs, record{Volume: b, Path: v.path, Bytes: v.bytes})
	}
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.cfg.StateFile), 0o700); err != nil {
		return err
	}
	tmp := m.cfg.StateFile + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
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
	return os.Rename(tmp, m.cfg.StateFile)
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
