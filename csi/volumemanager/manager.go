package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/pb"
)

// Store keeps the node's volume usage (host/client/state.DB implements it).
type Store interface {
	PutVolumeUsage(rec *pb.VolumeUsageRecord) error
	DeleteVolumeUsage(volumeID string) error
	VolumeUsages() ([]*pb.VolumeUsageRecord, error)
}

// Node is the part of a plugin's node service the manager calls;
// *csi.NodeClient implements it.
type Node interface {
	NodeStageVolume(ctx context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error)
	NodeUnstageVolume(ctx context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error)
	NodePublishVolume(ctx context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error)
	NodeUnpublishVolume(ctx context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error)
	NodeExpandVolume(ctx context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error)
}

var _ Node = (*csi.NodeClient)(nil)

// Plugin is a plugin's node instance on this node.
type Plugin struct {
	Node Node
	// StageUnstage is set when the node service has STAGE_UNSTAGE_VOLUME.
	StageUnstage bool
	// StagePublishDir is where the plugin sees PluginBase; empty when it
	// sees host paths (a storage adapter, an unisolated task).
	StagePublishDir string
	// Expand is set when the node service has EXPAND_VOLUME.
	Expand bool
}

// Plugins finds a plugin's node instance on this node, waiting while it
// is missing or unhealthy until ctx ends.
type Plugins interface {
	WaitNode(ctx context.Context, pluginID string) (Plugin, error)
}

// Config configures a Manager.
type Config struct {
	// DataDir is the client's data dir (required, absolute).
	DataDir string
	// NodeID names the node in errors.
	NodeID  string
	Store   Store
	Plugins Plugins
	// Retry is the policy for uncertain errors; its zero value is
	// csi.DefaultRetry's (250ms doubling to 30s, with jitter), retrying
	// until the caller's context ends.
	Retry  csi.Retry
	Logger hclog.Logger
	// Now stamps records (default time.Now).
	Now func() time.Time
}

// Manager stages and publishes the node's CSI volumes; see the package
// doc. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	logger hclog.Logger

	mu sync.Mutex
	// usage is the persisted usage, by volume ID; a record is replaced,
	// never changed in place, and only by the holder of its volume's lock.
	usage map[string]*pb.VolumeUsageRecord
	// locks serialize the calls about one volume: a channel holding one
	// token, so that waiting for it can end with a context.
	locks map[string]chan struct{}
}

// New returns a manager with the usage the store holds.
func New(cfg Config) (*Manager, error) {
	if !filepath.IsAbs(cfg.DataDir) || cfg.Store == nil || cfg.Plugins == nil {
		return nil, fmt.Errorf("%w: data dir %q (must be absolute), store set: %t, plugins set: %t",
			ErrInvalidConfig, cfg.DataDir, cfg.Store != nil, cfg.Plugins != nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retry.Logger == nil {
		cfg.Retry.Logger = cfg.Logger
	}
	m := &Manager{cfg: cfg, logger: cfg.Logger, usage: map[string]*pb.VolumeUsageRecord{}, locks: map[string]chan struct{}{}}
	recs, err := cfg.Store.VolumeUsages()
	if err != nil {
		// The readable records are kept; an unreadable one is a volume
		// this client can no longer tear down by itself.
		m.logger.Error("some volume usage records are unreadable", "error", err)
	}
	if n := markTearingDown(cfg.DataDir, recs); n > 0 {
		m.logger.Info("volume uses whose teardown was under way when the client stopped; the next teardown finishes them", "uses", n)
	}
	for _, r := range recs {
		m.usage[r.GetVolumeId()] = r
	}
	return m, nil
}

// Use is one user's hold on a volume, as Uses reports it.
type Use struct {
	VolumeID string
	PluginID string
	User     string
	Operator bool
	State    pb.VolumeUseState
	// Path is the user's publish path (PublishPath).
	Path string
}

// Uses returns every use the node holds, sorted by volume and user.
func (m *Manager) Uses() []Use {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Use
	for _, r := range m.usage {
		for _, u := range r.GetUses() {
			out = append(out, Use{VolumeID: r.GetVolumeId(), PluginID: r.GetPluginId(), User: u.GetUser(), Operator: u.GetOperator(),
				State: u.GetState(), Path: PublishPath(m.cfg.DataDir, u.GetUser(), r.GetVolumeId())})
		}
	}
	slices.SortFunc(out, func(a, b Use) int {
		if a.VolumeID != b.VolumeID {
			return cmp(a.VolumeID, b.VolumeID)
		}
		return cmp(a.User, b.User)
	})
	return out
}

// Usage returns a copy of the record of volumeID, false when the node
// holds nothing of it.
func (m *Manager) Usage(volumeID string) (*pb.VolumeUsageRecord, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.usage[volumeID]
	if !ok {
		return nil, false
	}
	return proto.CloneOf(r), true
}

func cmp(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// lock takes volumeID's lock, or fails when ctx ends first.
func (m *Manager) lock(ctx context.Context, volumeID string) (func(), error) {
	m.mu.Lock()
	l, ok := m.locks[volumeID]
	if !ok {
		l = make(chan struct{}, 1)
		m.locks[volumeID] = l
	}
	m.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the calls under way on volume %q: %w", volumeID, ctx.Err())
	}
}

// record returns a copy of volumeID's record (nil when none), for the
// holder of the volume's lock to change and save.
func (m *Manager) record(volumeID string) *pb.VolumeUsageRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.usage[volumeID]; ok {
		return proto.CloneOf(r)
	}
	return nil
}

// save persists rec and then makes it the manager's; a record without
// uses or stage is deleted instead.
func (m *Manager) save(rec *pb.VolumeUsageRecord) error {
	id := rec.GetVolumeId()
	if len(rec.GetUses()) == 0 && rec.GetStageState() == pb.VolumeStageState_VOLUME_STAGE_STATE_UNSPECIFIED {
		if err := m.cfg.Store.DeleteVolumeUsage(id); err != nil {
			return fmt.Errorf("volume %q on node %s: removing its usage record: %w", id, m.cfg.NodeID, err)
		}
		m.mu.Lock()
		delete(m.usage, id)
		m.mu.Unlock()
		return nil
	}
	rec.UpdatedAt = m.cfg.Now().UnixNano()
	if err := m.cfg.Store.PutVolumeUsage(rec); err != nil {
		return fmt.Errorf("volume %q on node %s: recording its usage: %w", id, m.cfg.NodeID, err)
	}
	m.mu.Lock()
	m.usage[id] = proto.CloneOf(rec)
	m.mu.Unlock()
	return nil
}

func findUse(rec *pb.VolumeUsageRecord, user string) (int, *pb.VolumeUse) {
	for i, u := range rec.GetUses() {
		if u.GetUser() == user {
			return i, u
		}
	}
	return -1, nil
}

// who names a user in errors.
func who(user string, operator bool) string {
	if operator {
		return fmt.Sprintf("operator claim %q", user)
	}
	return fmt.Sprintf("alloc %q", user)
}

// call runs one node call with retries of uncertain errors, looking up the
// plugin's node instance before each try.
func (m *Manager) call(ctx context.Context, c csi.Call, pluginID, volumeID string, op func(context.Context, Plugin) error) (err error) {
	defer func(start time.Time) { observeOp(c, start, err) }(time.Now())
	return m.cfg.Retry.Do(ctx, c, volumeID, func(ctx context.Context) error {
		p, err := m.cfg.Plugins.WaitNode(ctx, pluginID)
		if err != nil {
			return fmt.Errorf("waiting for the node plugin %q: %w", pluginID, err)
		}
		return op(ctx, p)
	})
}

// removeEmpty removes dir if it is empty; anything else is left.
func removeEmpty(dir string) {
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
}
