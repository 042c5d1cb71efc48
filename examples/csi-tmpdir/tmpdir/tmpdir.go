package tmpdir

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	hclog "github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/sdk"
)

// Name is the adapter's name: its file name in <plugin_dir>/csi.
const Name = "tmpdir"

// ProviderName is the CSI plugin name GetPluginInfo reports.
const ProviderName = "tmpdir.csi.example.berth.dev"

// Version is the plugin's version.
const Version = "0.1.0"

// Config is the adapter's plugin block config.
type Config struct {
	// MaxVolumes is how many volumes may be published on the node; 0 is
	// no limit.
	MaxVolumes int64 `json:"max_volumes"`
}

// Plugin serves the CSI identity and node services.
type Plugin struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedNodeServer

	nodeID string
	root   string
	cfg    Config
	log    hclog.Logger
	// mu serializes publish and unpublish: CSI asks plugins to handle
	// concurrent calls for one volume safely.
	mu sync.Mutex
	// mount and unmount are the bind mount calls; tests replace them.
	mount   func(source, target string) error
	unmount func(target string) error
}

var (
	_ csipb.IdentityServer = (*Plugin)(nil)
	_ csipb.NodeServer     = (*Plugin)(nil)
)

// New builds the plugin from what berth gave the adapter.
func New(env sdk.StorageEnv, log hclog.Logger) (*Plugin, error) {
	var cfg Config
	if err := json.Unmarshal(env.Config, &cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if cfg.MaxVolumes < 0 {
		return nil, fmt.Errorf("config: max_volumes %d must not be negative", cfg.MaxVolumes)
	}
	nodeID := env.NodeID
	if nodeID == "" {
		nodeID = env.NodeName
	}
	if nodeID == "" || env.DataDir == "" {
		return nil, errors.New("berth gave no node ID or data dir")
	}
	root := filepath.Join(env.DataDir, "volumes")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	return &Plugin{nodeID: nodeID, root: root, cfg: cfg, log: log, mount: bindMount, unmount: unmount}, nil
}

// GetPluginInfo implements csi.IdentityServer.
func (p *Plugin) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: ProviderName, VendorVersion: Version}, nil
}

// GetPluginCapabilities implements csi.IdentityServer: no controller
// service, no topology.
func (p *Plugin) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{}, nil
}

// Probe implements csi.IdentityServer: ready once its data dir is there.
func (p *Plugin) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	if _, err := os.Stat(p.root); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume directory: %v", err)
	}
	return &csipb.ProbeResponse{}, nil
}

// NodeGetInfo implements csi.NodeServer.
func (p *Plugin) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: p.nodeID, MaxVolumesPerNode: p.cfg.MaxVolumes}, nil
}

// NodeGetCapabilities implements csi.NodeServer: no staging.
func (p *Plugin) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{}, nil
}

// volumeIDPattern keeps a volume ID a single path element.
var volumeIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// NodePublishVolume implements csi.NodeServer: the volume's directory,
// created if new, is bind-mounted at the target. Publishing again to the
// same target succeeds (CSI calls are idempotent).
func (p *Plugin) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case !volumeIDPattern.MatchString(id):
		return nil, status.Errorf(codes.InvalidArgument, "volume ID %q: want 1-128 letters, digits, '.', '_' or '-'", id)
	case target == "" || !filepath.IsAbs(target):
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: target path %q must be absolute", id, target)
	case req.GetVolumeCapability().GetMount() == nil:
		return nil, status.Errorf(codes.InvalidArgument, "volume %s: only mount access is supported", id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	published, err := isMountPoint(target)
	switch {
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, status.Errorf(codes.Internal, "volume %s: target %s: %v", id, target, err)
	case published:
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	src := filepath.Join(p.root, id)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", id, err)
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: target %s: %v", id, target, err)
	}
	if err := p.mount(src, target); err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: bind mount at %s: %v", id, target, err)
	}
	p.log.Info("published", "volume", id, "target", target)
	return &csipb.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume implements csi.NodeServer: unmounts and removes the
// target; a target that is already gone is success. The volume's data
// stays.
func (p *Plugin) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" || target == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID and target path are required")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mounted, err := isMountPoint(target)
	if errors.Is(err, os.ErrNotExist) {
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: target %s: %v", id, target, err)
	}
	if mounted {
		if err := p.unmount(target); err != nil {
			return nil, status.Errorf(codes.Internal, "volume %s: unmount %s: %v", id, target, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "volume %s: removing %s: %v", id, target, err)
	}
	p.log.Info("unpublished", "volume", id, "target", target)
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}
