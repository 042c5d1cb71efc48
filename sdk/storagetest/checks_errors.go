package storagetest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// unknownID is a volume (and snapshot) ID no adapter has.
var unknownID = "storagetest-no-such-volume-" + strconv.Itoa(os.Getpid())

// paths returns a fresh staging directory (created, as the CO creates
// it) and a target path whose parent exists (the plugin creates the
// target), as berth hands them to a plugin.
func paths(t *testing.T) (staging, target string) {
	dir := t.TempDir()
	staging = filepath.Join(dir, "staging")
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(dir, "publish")
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	return staging, filepath.Join(parent, "target")
}

// checkMissingFields: a request without a field the spec requires is
// refused with InvalidArgument (berth does not retry it), before the
// adapter acts on it.
func checkMissingFields(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	vc := s.h.Volume.Capability
	staging, target := paths(t)
	if s.controller != nil {
		_, err := s.ctl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: []*csipb.VolumeCapability{vc}})
		wantCode(t, "ValidateVolumeCapabilities without volume_id", err, codes.InvalidArgument)
		_, err = s.ctl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: unknownID})
		if c := status.Code(err); c != codes.InvalidArgument && c != codes.NotFound {
			t.Errorf("ValidateVolumeCapabilities without volume_capabilities: %v, want InvalidArgument (or NotFound, for an unknown volume)", err)
		}
	}
	if s.creates() {
		_, err := s.ctl.CreateVolume(ctx, &csipb.CreateVolumeRequest{VolumeCapabilities: []*csipb.VolumeCapability{vc}})
		wantCode(t, "CreateVolume without name", err, codes.InvalidArgument)
		_, err = s.ctl.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: s.name("nocaps")})
		wantCode(t, "CreateVolume without volume_capabilities", err, codes.InvalidArgument)
		_, err = s.ctl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{})
		wantCode(t, "DeleteVolume without volume_id", err, codes.InvalidArgument)
	}
	if s.attaches() {
		_, err := s.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{NodeId: s.publishNode(), VolumeCapability: vc})
		wantCode(t, "ControllerPublishVolume without volume_id", err, codes.InvalidArgument)
		_, err = s.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: unknownID, VolumeCapability: vc})
		wantCode(t, "ControllerPublishVolume without node_id", err, codes.InvalidArgument)
		_, err = s.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: unknownID, NodeId: s.publishNode()})
		wantCode(t, "ControllerPublishVolume without volume_capability", err, codes.InvalidArgument)
		_, err = s.ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{NodeId: s.publishNode()})
		wantCode(t, "ControllerUnpublishVolume without volume_id", err, codes.InvalidArgument)
	}
	if s.nodeCaps == nil {
		return
	}
	stagingArg := ""
	if s.stages() {
		stagingArg = staging
		_, err := s.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{StagingTargetPath: staging, VolumeCapability: vc})
		wantCode(t, "NodeStageVolume without volume_id", err, codes.InvalidArgument)
		_, err = s.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: unknownID, VolumeCapability: vc})
		wantCode(t, "NodeStageVolume without staging_target_path", err, codes.InvalidArgument)
		_, err = s.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: unknownID, StagingTargetPath: staging})
		wantCode(t, "NodeStageVolume without volume_capability", err, codes.InvalidArgument)
		_, err = s.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{StagingTargetPath: staging})
		wantCode(t, "NodeUnstageVolume without volume_id", err, codes.InvalidArgument)
		_, err = s.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: unknownID})
		wantCode(t, "NodeUnstageVolume without staging_target_path", err, codes.InvalidArgument)
	}
	_, err := s.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{StagingTargetPath: stagingArg, TargetPath: target, VolumeCapability: vc})
	wantCode(t, "NodePublishVolume without volume_id", err, codes.InvalidArgument)
	_, err = s.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: unknownID, StagingTargetPath: stagingArg, VolumeCapability: vc})
	wantCode(t, "NodePublishVolume without target_path", err, codes.InvalidArgument)
	_, err = s.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: unknownID, StagingTargetPath: stagingArg, TargetPath: target})
	wantCode(t, "NodePublishVolume without volume_capability", err, codes.InvalidArgument)
	_, err = s.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{TargetPath: target})
	wantCode(t, "NodeUnpublishVolume without volume_id", err, codes.InvalidArgument)
	_, err = s.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: unknownID})
	wantCode(t, "NodeUnpublishVolume without target_path", err, codes.InvalidArgument)
	if _, err := os.Lstat(target); err == nil {
		t.Errorf("a refused NodePublishVolume left %s behind", target)
	}
}

// checkUnknownVolume: calls about a volume the adapter does not have
// answer NotFound, and the teardown calls succeed (there is nothing to
// undo), as the spec says and as berth classifies them: NotFound ends a
// publish with a final error, and counts as done for a teardown.
func checkUnknownVolume(t *testing.T, s *suite) {
	ctx, cancel := s.ctx()
	defer cancel()
	vc := s.h.Volume.Capability
	staging, target := paths(t)
	if s.controller != nil {
		_, err := s.ctl.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{VolumeId: unknownID, VolumeCapabilities: []*csipb.VolumeCapability{vc}})
		wantCode(t, "ValidateVolumeCapabilities of an unknown volume", err, codes.NotFound)
	}
	if s.creates() {
		_, err := s.ctl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: unknownID})
		wantUndone(t, "DeleteVolume of an unknown volume", err)
	}
	if s.attaches() {
		_, err := s.ctl.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: unknownID, NodeId: s.publishNode(), VolumeCapability: vc})
		wantCode(t, "ControllerPublishVolume of an unknown volume", err, codes.NotFound)
		_, err = s.ctl.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: unknownID, NodeId: s.publishNode()})
		wantUndone(t, "ControllerUnpublishVolume of an unknown volume", err)
	}
	if s.hasController(csipb.ControllerServiceCapability_RPC_GET_VOLUME) {
		_, err := s.ctl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: unknownID})
		wantCode(t, "ControllerGetVolume of an unknown volume", err, codes.NotFound)
	}
	if s.hasController(csipb.ControllerServiceCapability_RPC_EXPAND_VOLUME) {
		_, err := s.ctl.ControllerExpandVolume(ctx, &csipb.ControllerExpandVolumeRequest{VolumeId: unknownID, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}})
		wantCode(t, "ControllerExpandVolume of an unknown volume", err, codes.NotFound)
	}
	if s.nodeCaps == nil {
		return
	}
	stagingArg := ""
	if s.stages() {
		stagingArg = staging
	}
	// Only an adapter that creates its volumes knows which exist; a node
	// plugin of pre-provisioned volumes may take any ID for one.
	if s.creates() {
		if s.stages() {
			_, err := s.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: unknownID, StagingTargetPath: staging, VolumeCapability: vc})
			wantCode(t, "NodeStageVolume of an unknown volume", err, codes.NotFound)
		}
		_, err := s.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{VolumeId: unknownID, StagingTargetPath: stagingArg, TargetPath: target, VolumeCapability: vc})
		wantCode(t, "NodePublishVolume of an unknown volume", err, codes.NotFound)
	}
	_, err := s.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: unknownID, TargetPath: target})
	wantUndone(t, "NodeUnpublishVolume of an unknown volume", err)
	if s.stages() {
		_, err := s.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: unknownID, StagingTargetPath: staging})
		wantUndone(t, "NodeUnstageVolume of an unknown volume", err)
	}
	if s.hasNode(csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS) {
		_, err := s.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: unknownID, VolumePath: target, StagingTargetPath: stagingArg})
		wantCode(t, "NodeGetVolumeStats of an unknown volume", err, codes.NotFound)
	}
	if s.hasNode(csipb.NodeServiceCapability_RPC_EXPAND_VOLUME) {
		_, err := s.node.NodeExpandVolume(ctx, &csipb.NodeExpandVolumeRequest{VolumeId: unknownID, VolumePath: target, StagingTargetPath: stagingArg,
			CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 30}, VolumeCapability: vc})
		wantCode(t, "NodeExpandVolume of an unknown volume", err, codes.NotFound)
	}
	if _, err := os.Lstat(target); err == nil {
		t.Errorf("calls about an unknown volume left %s behind", target)
	}
}
