package csi_test

import (
	"errors"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/rpc/pb"
)

func TestFingerprint(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	p.GetPluginInfo.Always(&csipb.GetPluginInfoResponse{Name: "example.csi.io", VendorVersion: "v1.4.2", Manifest: map[string]string{"commit": "abc"}}, nil)
	p.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{
		csifake.ServiceCapability(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
		csifake.ServiceCapability(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		{Type: &csipb.PluginCapability_VolumeExpansion_{VolumeExpansion: &csipb.PluginCapability_VolumeExpansion{Type: csipb.PluginCapability_VolumeExpansion_ONLINE}}},
	}}, nil)
	p.NodeGetInfo.Always(&csipb.NodeGetInfoResponse{NodeId: "n7", MaxVolumesPerNode: 16}, nil)

	fp, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fp.Info.Name != "example.csi.io" || fp.Info.VendorVersion != "v1.4.2" || fp.Info.Manifest["commit"] != "abc" {
		t.Errorf("info %+v", fp.Info)
	}
	if !fp.Ready {
		t.Error("a plugin answering ready=true is not ready")
	}
	if !fp.Plugin.HasService(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS) ||
		!fp.Plugin.HasExpansion(csipb.PluginCapability_VolumeExpansion_ONLINE) ||
		fp.Plugin.HasExpansion(csipb.PluginCapability_VolumeExpansion_OFFLINE) {
		t.Errorf("plugin capabilities %+v", fp.Plugin)
	}
	if !fp.Controller.Has(csipb.ControllerServiceCapability_RPC_GET_VOLUME) || fp.Controller.Has(csipb.ControllerServiceCapability_RPC_CLONE_VOLUME) {
		t.Errorf("controller capabilities %v", fp.Controller)
	}
	if !fp.Node.Has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) || fp.NodeInfo.GetNodeId() != "n7" || fp.NodeInfo.GetMaxVolumesPerNode() != 16 {
		t.Errorf("node %v %v", fp.Node, fp.NodeInfo)
	}
	if !fp.ControllerRequired() {
		t.Error("controller service with publish/unpublish must require the controller")
	}
}

func TestControllerRequired(t *testing.T) {
	withService := &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{
		csifake.ServiceCapability(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
	}}
	publish := csifake.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	createOnly := csifake.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME)
	cases := []struct {
		name       string
		plugin     *csipb.GetPluginCapabilitiesResponse
		controller *csipb.ControllerGetCapabilitiesResponse
		want       bool
		asked      int // ControllerGetCapabilities calls expected
	}{
		{"service and publish", withService, publish, true, 1},
		{"service without publish", withService, createOnly, false, 1},
		{"publish without service", &csipb.GetPluginCapabilitiesResponse{}, publish, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _, c := startFake(t)
			p.GetPluginCapabilities.Always(tc.plugin, nil)
			p.ControllerGetCapabilities.Always(tc.controller, nil)
			fp, err := c.Fingerprint(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := fp.ControllerRequired(); got != tc.want {
				t.Errorf("ControllerRequired = %v, want %v", got, tc.want)
			}
			if n := p.ControllerGetCapabilities.Count(); n != tc.asked {
				t.Errorf("ControllerGetCapabilities called %d times, want %d", n, tc.asked)
			}
		})
	}
}

func TestFingerprintControllerOnlyAndProbe(t *testing.T) {
	p, _, c := startFake(t)
	ctx := testCtx(t)
	p.NodeGetCapabilities.Always(nil, status.Error(codes.Unimplemented, "no node service"))
	p.Probe.Next(&csipb.ProbeResponse{}, nil) // readiness absent: ready
	fp, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fp.Node != nil || fp.NodeInfo != nil || p.NodeGetInfo.Count() != 0 {
		t.Errorf("controller-only plugin: node %v %v, NodeGetInfo called %d times", fp.Node, fp.NodeInfo, p.NodeGetInfo.Count())
	}
	if !fp.Ready {
		t.Error("absent readiness must mean ready")
	}
	p.Probe.Next(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil)
	if ready, err := c.Identity.Probe(ctx); err != nil || ready {
		t.Errorf("initialising plugin: Probe = %v, %v; want false, nil", ready, err)
	}
	p.NodeGetCapabilities.Always(nil, status.Error(codes.Internal, "boom"))
	if _, err := c.Fingerprint(ctx); status.Code(err) != codes.Internal {
		t.Errorf("a failing node service must fail the fingerprint, got %v", err)
	}
	p.GetPluginInfo.Next(&csipb.GetPluginInfoResponse{Name: "x"}, nil)
	if _, err := c.Fingerprint(ctx); !errors.Is(err, csi.ErrInvalidResponse) {
		t.Errorf("missing vendor_version: got %v", err)
	}
}

// TestFingerprintAccessorsAndPluginInfo: what the plugin manager reports
// to the servers comes from the fingerprint's accessors.
func TestFingerprintAccessorsAndPluginInfo(t *testing.T) {
	p, _, c := startFake(t)
	p.GetPluginInfo.Always(&csipb.GetPluginInfoResponse{Name: "example.csi.io", VendorVersion: "v1.4.2"}, nil)
	p.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{
		csifake.ServiceCapability(csipb.PluginCapability_Service_CONTROLLER_SERVICE),
		csifake.ServiceCapability(csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
	}}, nil)
	p.NodeGetInfo.Always(&csipb.NodeGetInfoResponse{NodeId: "n7", MaxVolumesPerNode: 16,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "a"}}}, nil)
	fp, err := c.Fingerprint(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if fp.NodeID() != "n7" || fp.MaxVolumes() != 16 || fp.Topology()["zone"] != "a" || !fp.NeedsStaging() || !fp.HasController() || !fp.HasNode() {
		t.Fatalf("accessors: node %q max %d topology %v staging %v controller %v node %v",
			fp.NodeID(), fp.MaxVolumes(), fp.Topology(), fp.NeedsStaging(), fp.HasController(), fp.HasNode())
	}
	info := fp.PluginInfo("hp", pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH, pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, "a1")
	if info.GetPluginId() != "hp" || info.GetAllocId() != "a1" || !info.GetHealthy() || info.GetProvider() != "example.csi.io" ||
		info.GetProviderVersion() != "v1.4.2" || !info.GetControllerRequired() || !info.GetRequiresTopologies() {
		t.Fatalf("plugin info %v", info)
	}
	if !info.GetControllerInfo().GetSupportsAttachDetach() || info.GetNodeInfo().GetId() != "n7" ||
		info.GetNodeInfo().GetMaxVolumes() != 16 || !info.GetNodeInfo().GetRequiresNodeStageVolume() {
		t.Fatalf("controller %v node %v", info.GetControllerInfo(), info.GetNodeInfo())
	}
	if ctl := info.GetControllerInfo(); !ctl.GetSupportsListVolumes() || ctl.GetSupportsListPublishedNodes() {
		t.Fatalf("controller %v: want list volumes without published nodes (the fake's capabilities)", ctl)
	}
	p.ControllerGetCapabilities.Always(csifake.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csipb.ControllerServiceCapability_RPC_LIST_VOLUMES, csipb.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES), nil)
	if fp, err = c.Fingerprint(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if ctl := fp.PluginInfo("hp", pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH, pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, "a1").GetControllerInfo(); !ctl.GetSupportsListPublishedNodes() {
		t.Fatalf("controller %v: want LIST_VOLUMES_PUBLISHED_NODES reported", ctl)
	}
	// Topology is a copy: changing it changes nothing in the fingerprint.
	fp.Topology()["zone"] = "b"
	if fp.Topology()["zone"] != "a" {
		t.Fatal("Topology handed out the fingerprint's own map")
	}
}
