package csifake

import (
	"context"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// Plugin is a fake CSI plugin: one scripted Call per RPC of the Identity,
// Controller and Node services. Create it with New, serve it with Listen or
// Register, and script or inspect each RPC through its field.
type Plugin struct {
	// Identity service.
	GetPluginInfo         Call[csipb.GetPluginInfoRequest, csipb.GetPluginInfoResponse]
	GetPluginCapabilities Call[csipb.GetPluginCapabilitiesRequest, csipb.GetPluginCapabilitiesResponse]
	Probe                 Call[csipb.ProbeRequest, csipb.ProbeResponse]
	// Controller service.
	CreateVolume               Call[csipb.CreateVolumeRequest, csipb.CreateVolumeResponse]
	DeleteVolume               Call[csipb.DeleteVolumeRequest, csipb.DeleteVolumeResponse]
	ControllerPublishVolume    Call[csipb.ControllerPublishVolumeRequest, csipb.ControllerPublishVolumeResponse]
	ControllerUnpublishVolume  Call[csipb.ControllerUnpublishVolumeRequest, csipb.ControllerUnpublishVolumeResponse]
	ValidateVolumeCapabilities Call[csipb.ValidateVolumeCapabilitiesRequest, csipb.ValidateVolumeCapabilitiesResponse]
	ListVolumes                Call[csipb.ListVolumesRequest, csipb.ListVolumesResponse]
	ControllerListVolumeHealth Call[csipb.ControllerListVolumeHealthRequest, csipb.ControllerListVolumeHealthResponse]
	ControllerGetVolumeHealth  Call[csipb.ControllerGetVolumeHealthRequest, csipb.ControllerGetVolumeHealthResponse]
	GetCapacity                Call[csipb.GetCapacityRequest, csipb.GetCapacityResponse]
	ControllerGetCapabilities  Call[csipb.ControllerGetCapabilitiesRequest, csipb.ControllerGetCapabilitiesResponse]
	CreateSnapshot             Call[csipb.CreateSnapshotRequest, csipb.CreateSnapshotResponse]
	DeleteSnapshot             Call[csipb.DeleteSnapshotRequest, csipb.DeleteSnapshotResponse]
	ListSnapshots              Call[csipb.ListSnapshotsRequest, csipb.ListSnapshotsResponse]
	GetSnapshot                Call[csipb.GetSnapshotRequest, csipb.GetSnapshotResponse]
	ControllerExpandVolume     Call[csipb.ControllerExpandVolumeRequest, csipb.ControllerExpandVolumeResponse]
	ControllerGetVolume        Call[csipb.ControllerGetVolumeRequest, csipb.ControllerGetVolumeResponse]
	ControllerModifyVolume     Call[csipb.ControllerModifyVolumeRequest, csipb.ControllerModifyVolumeResponse]
	// Node service.
	NodeStageVolume      Call[csipb.NodeStageVolumeRequest, csipb.NodeStageVolumeResponse]
	NodeUnstageVolume    Call[csipb.NodeUnstageVolumeRequest, csipb.NodeUnstageVolumeResponse]
	NodePublishVolume    Call[csipb.NodePublishVolumeRequest, csipb.NodePublishVolumeResponse]
	NodeUnpublishVolume  Call[csipb.NodeUnpublishVolumeRequest, csipb.NodeUnpublishVolumeResponse]
	NodeGetVolumeStats   Call[csipb.NodeGetVolumeStatsRequest, csipb.NodeGetVolumeStatsResponse]
	NodeGetVolumeHealth  Call[csipb.NodeGetVolumeHealthRequest, csipb.NodeGetVolumeHealthResponse]
	NodeGetStorageHealth Call[csipb.NodeGetStorageHealthRequest, csipb.NodeGetStorageHealthResponse]
	NodeExpandVolume     Call[csipb.NodeExpandVolumeRequest, csipb.NodeExpandVolumeResponse]
	NodeGetCapabilities  Call[csipb.NodeGetCapabilitiesRequest, csipb.NodeGetCapabilitiesResponse]
	NodeGetInfo          Call[csipb.NodeGetInfoRequest, csipb.NodeGetInfoResponse]
}

// identityServer adapts Plugin to csipb.IdentityServer.
type identityServer struct {
	csipb.UnimplementedIdentityServer
	p *Plugin
}

var _ csipb.IdentityServer = identityServer{}

func (s identityServer) GetPluginInfo(ctx context.Context, r *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return s.p.GetPluginInfo.serve(ctx, r)
}

func (s identityServer) GetPluginCapabilities(ctx context.Context, r *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return s.p.GetPluginCapabilities.serve(ctx, r)
}

func (s identityServer) Probe(ctx context.Context, r *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return s.p.Probe.serve(ctx, r)
}

// controllerServer adapts Plugin to csipb.ControllerServer.
type controllerServer struct {
	csipb.UnimplementedControllerServer
	p *Plugin
}

var _ csipb.ControllerServer = controllerServer{}

func (s controllerServer) CreateVolume(ctx context.Context, r *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error) {
	return s.p.CreateVolume.serve(ctx, r)
}

func (s controllerServer) DeleteVolume(ctx context.Context, r *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error) {
	return s.p.DeleteVolume.serve(ctx, r)
}

func (s controllerServer) ControllerPublishVolume(ctx context.Context, r *csipb.ControllerPublishVolumeRequest) (*csipb.ControllerPublishVolumeResponse, error) {
	return s.p.ControllerPublishVolume.serve(ctx, r)
}

func (s controllerServer) ControllerUnpublishVolume(ctx context.Context, r *csipb.ControllerUnpublishVolumeRequest) (*csipb.ControllerUnpublishVolumeResponse, error) {
	return s.p.ControllerUnpublishVolume.serve(ctx, r)
}

func (s controllerServer) ValidateVolumeCapabilities(ctx context.Context, r *csipb.ValidateVolumeCapabilitiesRequest) (*csipb.ValidateVolumeCapabilitiesResponse, error) {
	return s.p.ValidateVolumeCapabilities.serve(ctx, r)
}

func (s controllerServer) ListVolumes(ctx context.Context, r *csipb.ListVolumesRequest) (*csipb.ListVolumesResponse, error) {
	return s.p.ListVolumes.serve(ctx, r)
}

func (s controllerServer) ControllerListVolumeHealth(ctx context.Context, r *csipb.ControllerListVolumeHealthRequest) (*csipb.ControllerListVolumeHealthResponse, error) {
	return s.p.ControllerListVolumeHealth.serve(ctx, r)
}

func (s controllerServer) ControllerGetVolumeHealth(ctx context.Context, r *csipb.ControllerGetVolumeHealthRequest) (*csipb.ControllerGetVolumeHealthResponse, error) {
	return s.p.ControllerGetVolumeHealth.serve(ctx, r)
}

func (s controllerServer) GetCapacity(ctx context.Context, r *csipb.GetCapacityRequest) (*csipb.GetCapacityResponse, error) {
	return s.p.GetCapacity.serve(ctx, r)
}

func (s controllerServer) ControllerGetCapabilities(ctx context.Context, r *csipb.ControllerGetCapabilitiesRequest) (*csipb.ControllerGetCapabilitiesResponse, error) {
	return s.p.ControllerGetCapabilities.serve(ctx, r)
}

func (s controllerServer) CreateSnapshot(ctx context.Context, r *csipb.CreateSnapshotRequest) (*csipb.CreateSnapshotResponse, error) {
	return s.p.CreateSnapshot.serve(ctx, r)
}

func (s controllerServer) DeleteSnapshot(ctx context.Context, r *csipb.DeleteSnapshotRequest) (*csipb.DeleteSnapshotResponse, error) {
	return s.p.DeleteSnapshot.serve(ctx, r)
}

func (s controllerServer) ListSnapshots(ctx context.Context, r *csipb.ListSnapshotsRequest) (*csipb.ListSnapshotsResponse, error) {
	return s.p.ListSnapshots.serve(ctx, r)
}

func (s controllerServer) GetSnapshot(ctx context.Context, r *csipb.GetSnapshotRequest) (*csipb.GetSnapshotResponse, error) {
	return s.p.GetSnapshot.serve(ctx, r)
}

func (s controllerServer) ControllerExpandVolume(ctx context.Context, r *csipb.ControllerExpandVolumeRequest) (*csipb.ControllerExpandVolumeResponse, error) {
	return s.p.ControllerExpandVolume.serve(ctx, r)
}

func (s controllerServer) ControllerGetVolume(ctx context.Context, r *csipb.ControllerGetVolumeRequest) (*csipb.ControllerGetVolumeResponse, error) {
	return s.p.ControllerGetVolume.serve(ctx, r)
}

func (s controllerServer) ControllerModifyVolume(ctx context.Context, r *csipb.ControllerModifyVolumeRequest) (*csipb.ControllerModifyVolumeResponse, error) {
	return s.p.ControllerModifyVolume.serve(ctx, r)
}

// nodeServer adapts Plugin to csipb.NodeServer.
type nodeServer struct {
	csipb.UnimplementedNodeServer
	p *Plugin
}

var _ csipb.NodeServer = nodeServer{}

func (s nodeServer) NodeStageVolume(ctx context.Context, r *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	return s.p.NodeStageVolume.serve(ctx, r)
}

func (s nodeServer) NodeUnstageVolume(ctx context.Context, r *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	return s.p.NodeUnstageVolume.serve(ctx, r)
}

func (s nodeServer) NodePublishVolume(ctx context.Context, r *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	return s.p.NodePublishVolume.serve(ctx, r)
}

func (s nodeServer) NodeUnpublishVolume(ctx context.Context, r *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	return s.p.NodeUnpublishVolume.serve(ctx, r)
}

func (s nodeServer) NodeGetVolumeStats(ctx context.Context, r *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	return s.p.NodeGetVolumeStats.serve(ctx, r)
}

func (s nodeServer) NodeGetVolumeHealth(ctx context.Context, r *csipb.NodeGetVolumeHealthRequest) (*csipb.NodeGetVolumeHealthResponse, error) {
	return s.p.NodeGetVolumeHealth.serve(ctx, r)
}

func (s nodeServer) NodeGetStorageHealth(ctx context.Context, r *csipb.NodeGetStorageHealthRequest) (*csipb.NodeGetStorageHealthResponse, error) {
	return s.p.NodeGetStorageHealth.serve(ctx, r)
}

func (s nodeServer) NodeExpandVolume(ctx context.Context, r *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	return s.p.NodeExpandVolume.serve(ctx, r)
}

func (s nodeServer) NodeGetCapabilities(ctx context.Context, r *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	return s.p.NodeGetCapabilities.serve(ctx, r)
}

func (s nodeServer) NodeGetInfo(ctx context.Context, r *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	return s.p.NodeGetInfo.serve(ctx, r)
}
