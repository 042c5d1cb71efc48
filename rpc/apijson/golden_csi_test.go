package apijson_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// goldenPlugin is a CSI plugin as GET /v1/plugin/csi/{id} shows it: a
// controller and two node instances (one unhealthy), the allocs that run
// them, Nomad's counts in snake case.
func goldenPlugin() *pb.CSIPlugin {
	node := func(nodeID, alloc string, healthy bool, desc string) *pb.CSIPluginInfo {
		return &pb.CSIPluginInfo{
			PluginId: "aws-ebs0", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK,
			AllocId: alloc, Healthy: healthy, HealthDescription: desc, Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1",
			RequiresControllerPlugin: true, ControllerRequired: true, UpdatedAt: at,
			NodeInfo: &pb.CSINodeInfo{Id: "i-0a1b2c" + nodeID[:2], MaxVolumes: 25, RequiresNodeStageVolume: true,
				AccessibleTopology: map[string]string{"topology.ebs.csi.aws.com/zone": "eu-west-1a"}},
		}
	}
	return &pb.CSIPlugin{
		Id: "aws-ebs0", Provider: "ebs.csi.aws.com", Version: "1.29.1", ControllerRequired: true,
		ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 1, NodesExpected: 2, Schedulable: true,
		Controllers: map[string]*pb.CSIPluginInfo{"5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80": {
			PluginId: "aws-ebs0", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK,
			AllocId: "0b9f2a51-7d3c-4e8a-b6f1-2c3d4e5f6a70", Healthy: true, HealthDescription: "healthy",
			Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1", RequiresControllerPlugin: true, ControllerRequired: true, UpdatedAt: at,
			ControllerInfo: &pb.CSIControllerInfo{SupportsCreateDelete: true, SupportsAttachDetach: true, SupportsListVolumes: true, SupportsExpand: true},
		}},
		Nodes: map[string]*pb.CSIPluginInfo{
			"5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80": node("5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", "0b9f2a51-7d3c-4e8a-b6f1-2c3d4e5f6a70", true, "healthy"),
			"7e1a2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b": node("7e1a2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b", "c4d5e6f7-0a1b-4c2d-8e3f-4a5b6c7d8e9f", false, "probe: context deadline exceeded"),
		},
		Allocations: []*pb.CSIPluginAlloc{
			{AllocId: "0b9f2a51-7d3c-4e8a-b6f1-2c3d4e5f6a70", NodeId: "5d0f6a0e-8c1b-4f7a-9d2e-3b4c5d6e7f80", JobId: "plugin-aws-ebs", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH, Healthy: true},
			{AllocId: "c4d5e6f7-0a1b-4c2d-8e3f-4a5b6c7d8e9f", NodeId: "7e1a2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b", JobId: "plugin-aws-ebs", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE},
		},
		CreateIndex: 40, ModifyIndex: 57,
	}
}

// TestGoldenCSIPlugin writes testdata/csi_plugin.golden (go test -update
// rewrites it) and reads it back to the same plugin.
func TestGoldenCSIPlugin(t *testing.T) {
	got, err := apijson.Marshal(goldenPlugin())
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "csi_plugin.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
	back := &pb.CSIPlugin{}
	if err := apijson.Unmarshal(want, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, goldenPlugin()) {
		t.Fatalf("decoded %v\nwant %v", back, goldenPlugin())
	}
	for _, field := range []string{`"controllers_healthy": 1`, `"controllers_expected": 1`, `"nodes_healthy": 1`, `"nodes_expected": 2`,
		`"provider": "ebs.csi.aws.com"`, `"version": "1.29.1"`, `"controller_required": true`, `"allocations": [`, `"type": "monolith"`} {
		if !bytes.Contains(want, []byte(field)) {
			t.Errorf("golden plugin lacks %s", field)
		}
	}
}
