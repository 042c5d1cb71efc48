package storagetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// brokenEnv names the way the fake adapter breaks the rules, for the tests
// that show the harness catches it; empty: it keeps them.
const brokenEnv = "STORAGETEST_FAKE_BROKEN"

// fake is a controller + node CSI plugin that needs no root: a volume is a
// directory under its data dir, published as a symlink at the target. Its
// records live in the data dir, so a restarted process knows what the
// last one did.
type fake struct {
	csipb.UnimplementedIdentityServer
	csipb.UnimplementedControllerServer
	csipb.UnimplementedNodeServer

	root   string
	broken string
	mu     sync.Mutex
	probes int
	seq    int
}

var (
	_ csipb.IdentityServer   = (*fake)(nil)
	_ csipb.ControllerServer = (*fake)(nil)
	_ csipb.NodeServer       = (*fake)(nil)
)

func newFake(dataDir, broken string) (*fake, error) {
	if broken == "forget-on-restart" {
		d, err := os.MkdirTemp(dataDir, "forgetful")
		if err != nil {
			return nil, err
		}
		dataDir = d
	}
	f := &fake{root: dataDir, broken: broken}
	for _, d := range []string{"data", "size", "attached", "staged"} {
		if err := os.MkdirAll(filepath.Join(dataDir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (f *fake) path(kind, id string) string { return filepath.Join(f.root, kind, id) }

func (f *fake) exists(id string) bool {
	_, err := os.Stat(f.path("size", id))
	return err == nil
}

func (f *fake) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: "fake.storagetest.berth.dev", VendorVersion: "1.0"}, nil
}

func (f *fake) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	if f.broken == "unadvertised-controller" {
		return &csipb.GetPluginCapabilitiesResponse{}, nil
	}
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{{Type: &csipb.PluginCapability_Service_{
		Service: &csipb.PluginCapability_Service{Type: csipb.PluginCapability_Service_CONTROLLER_SERVICE}}}}}, nil
}

// Probe says "not ready" once, so the harness's wait is exercised.
func (f *fake) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probes++
	return &csipb.ProbeResponse{Ready: wrapperspb.Bool(f.probes > 1 && f.broken != "never-ready")}, nil
}

func (f *fake) ControllerGetCapabilities(context.Context, *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	var caps []*csipb.ControllerServiceCapability
	for _, c := range []csipb.ControllerServiceCapability_RPC_Type{
		csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES,
	} {
		caps = append(caps, &csipb.ControllerServiceCapability{Type: &csipb.ControllerServiceCapability_Rpc{Rpc: &csipb.ControllerServiceCapability_RPC{Type: c}}})
	}
	return &csipb.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (f *fake) CreateVolume(_ context.Context, req *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	if req.GetName() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "name and volume_capabilities are required")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := req.GetName()
	if f.broken == "create-not-idempotent" {
		f.seq++
		id += "-" + strconv.Itoa(f.seq)
	}
	size := max(req.GetCapacityRange().GetRequiredBytes(), 1<<20)
	if raw, err := os.ReadFile(f.path("size", id)); err == nil {
		have, _ := strconv.ParseInt(string(raw), 10, 64)
		if have < req.GetCapacityRange().GetRequiredBytes() || (req.GetCapacityRange().GetLimitBytes() > 0 && have > req.GetCapacityRange().GetLimitBytes()) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists with %d bytes", id, have)
		}
		size = have
	} else {
		if err := os.MkdirAll(f.path("data", id), 0o755); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.WriteFile(f.path("size", id), []byte(strconv.FormatInt(size, 10)), 0o644); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: id, CapacityBytes: size}}, nil
}

func (f *fake) DeleteVolume(_ context.Context, req *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, kind := range []string{"size", "data", "attached"} {
		if err := os.RemoveAll(f.path(kind, req.GetVolumeId())); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csipb.DeleteVolumeResponse{}, nil
}

func (f *fake) ValidateVolumeCapabilities(_ context.Context, req *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_capabilities are required")
	}
	if !f.exists(req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %s", req.GetVolumeId())
	}
	return &csipb.ValidateVolumeCapabilitiesResponse{Confirmed: &csipb.ValidateVolumeCapabilitiesResponse_Confirmed{VolumeCapabilities: req.GetVolumeCapabilities()}}, nil
}

func (f *fake) ListVolumes(context.Context, *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	entries, err := os.ReadDir(filepath.Join(f.root, "size"))
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &csipb.ListVolumesResponse{}
	for _, e := range entries {
		resp.Entries = append(resp.Entries, &csipb.ListVolumesResponse_Entry{Volume: &csipb.Volume{VolumeId: e.Name()}})
	}
	return resp, nil
}

func (f *fake) ControllerPublishVolume(_ context.Context, req *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetNodeId() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, node_id and volume_capability are required")
	}
	if !f.exists(req.GetVolumeId()) {
		if f.broken == "unknown-internal" {
			return nil, status.Error(codes.Internal, "no such file")
		}
		return nil, status.Errorf(codes.NotFound, "volume %s", req.GetVolumeId())
	}
	if err := os.WriteFile(f.path("attached", req.GetVolumeId()), []byte(req.GetNodeId()), 0o644); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.ControllerPublishVolumeResponse{PublishContext: map[string]string{"node": req.GetNodeId()}}, nil
}

func (f *fake) ControllerUnpublishVolume(_ context.Context, req *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if err := os.Remove(f.path("attached", req.GetVolumeId())); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.ControllerUnpublishVolumeResponse{}, nil
}

func (f *fake) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: []*csipb.NodeServiceCapability{{Type: &csipb.NodeServiceCapability_Rpc{
		Rpc: &csipb.NodeServiceCapability_RPC{Type: csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME}}}}}, nil
}

func (f *fake) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return &csipb.NodeGetInfoResponse{NodeId: "fake-" + NodeID}, nil
}

func (f *fake) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, staging_target_path and volume_capability are required")
	}
	if !f.exists(req.GetVolumeId()) {
		return nil, status.Errorf(codes.NotFound, "volume %s", req.GetVolumeId())
	}
	if err := os.WriteFile(f.path("staged", req.GetVolumeId()), []byte(req.GetStagingTargetPath()), 0o644); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (f *fake) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if err := os.Remove(f.path("staged", req.GetVolumeId())); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (f *fake) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" || target == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, target_path and volume_capability are required")
	}
	if !f.exists(id) {
		return nil, status.Errorf(codes.NotFound, "volume %s", id)
	}
	staged, err := os.ReadFile(f.path("staged", id))
	if err != nil || string(staged) != req.GetStagingTargetPath() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, req.GetStagingTargetPath())
	}
	if dest, err := os.Readlink(target); err == nil && dest == f.path("data", id) {
		return &csipb.NodePublishVolumeResponse{}, nil
	}
	if err := os.Symlink(f.path("data", id), target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (f *fake) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || (req.GetTargetPath() == "" && f.broken != "missing-field-ok") {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	if f.broken == "unpublish-leaves-target" || req.GetTargetPath() == "" {
		return &csipb.NodeUnpublishVolumeResponse{}, nil
	}
	if err := os.Remove(req.GetTargetPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

// fakeName is the fake's adapter name, which "wrong-name" gets wrong.
func fakeName(broken string) string {
	if broken == "wrong-name" {
		return "not-fake"
	}
	return "fake"
}
