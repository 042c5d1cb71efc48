package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"berth.dev/berth/rpc/pb"
)

const pluginNode = "7e1a2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b"

func ebsPlugin(id string) *pb.CSIPlugin {
	return &pb.CSIPlugin{Id: id, Provider: "ebs.csi.aws.com", Version: "1.29.1", ControllerRequired: true,
		ControllersHealthy: 1, ControllersExpected: 1, NodesHealthy: 1, NodesExpected: 2, Schedulable: true,
		Controllers: map[string]*pb.CSIPluginInfo{pluginNode: {PluginId: id, Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER,
			Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, AllocId: allocA, Healthy: true, Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1"}},
		Nodes: map[string]*pb.CSIPluginInfo{pluginNode: {PluginId: id, Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE,
			Source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, AllocId: allocA, HealthDescription: "probe timed out"}},
		Allocations: []*pb.CSIPluginAlloc{{AllocId: allocA, NodeId: pluginNode, JobId: "plugin-ebs", Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH, Healthy: true}},
	}
}

// TestPluginStatusListDetailAndPrefix: the list shows each plugin's
// counts, an ID prefix resolves as jobs' do, -verbose adds the instances
// and full IDs, -json prints the API's object.
func TestPluginStatusListDetailAndPrefix(t *testing.T) {
	f := newFakeCluster(t)
	wantOut(t, []string{"plugin", "status", "-address", f.url}, 0, "No CSI plugins")
	f.plugins["aws-ebs0"] = ebsPlugin("aws-ebs0")
	f.plugins["aws-ebs1"] = ebsPlugin("aws-ebs1")
	f.plugins["nfs"] = &pb.CSIPlugin{Id: "nfs", NodesExpected: 1}

	out := wantOut(t, []string{"plugin", "status", "-address", f.url}, 0, "Container Storage Interface\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "ID ") ||
		!strings.Contains(lines[2], "aws-ebs0  ebs.csi.aws.com  1/1                           1/2") ||
		!strings.Contains(lines[4], "nfs       -                0/0                           0/1") {
		t.Fatalf("plugin status:\n%s", out)
	}

	out = wantOut(t, []string{"plugin", "status", "-address", f.url, "aws-ebs0"}, 0,
		"ID                    = aws-ebs0\n", "Nodes Expected        = 2\n", "Controller Required   = true\n", "Schedulable           = true\n",
		"Allocations\nID        Node ID   Job ID      Type      Healthy\na1a1a1a1  7e1a2b3c  plugin-ebs  monolith  true\n")
	if strings.Contains(out, "Instances") {
		t.Errorf("instances shown without -verbose:\n%s", out)
	}
	wantOut(t, []string{"plugin", "status", "-address", f.url, "-verbose", "nf"}, 0,
		"ID                    = nfs\n", "No allocations run this plugin\n", "Instances\n")
	wantOut(t, []string{"plugin", "status", "-address", f.url, "-verbose", "aws-ebs1"}, 0,
		pluginNode+"  controller  task    "+allocA+"  true     ebs.csi.aws.com  1.29.1",
		pluginNode+"  node        task    "+allocA+"  false    -                -        probe timed out")
	wantOut(t, []string{"plugin", "status", "-address", f.url, "aws"}, 1, `prefix "aws" matches 2 CSI plugins: aws-ebs0, aws-ebs1`)
	wantOut(t, []string{"plugin", "status", "-address", f.url, "zfs"}, 1, `no CSI plugin with ID or prefix "zfs"`)
	wantOut(t, []string{"plugin", "status", "-address", f.url, "-type", "host"}, exitUsage, `-type="host": the only plugin type is csi`)

	out = wantOut(t, []string{"plugin", "status", "-address", f.url, "-json", "aws-ebs0"}, 0)
	var p struct {
		ID            string `json:"id"`
		NodesExpected int    `json:"nodes_expected"`
		Allocations   []struct {
			AllocID string `json:"alloc_id"`
		} `json:"allocations"`
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.ID != "aws-ebs0" || p.NodesExpected != 2 || len(p.Allocations) != 1 {
		t.Fatalf("plugin status -json: %v\n%s", err, out)
	}
	out = wantOut(t, []string{"plugin", "status", "-address", f.url, "-json"}, 0)
	var list []struct{ ID string }
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 3 {
		t.Fatalf("plugin status -json list: %v\n%s", err, out)
	}
}

// TestNodeStatusListsItsCSIPlugins: node status shows the node's plugin
// instances, controllers first; a node without any shows no section.
func TestNodeStatusListsItsCSIPlugins(t *testing.T) {
	f := newFakeCluster(t)
	n := &pb.Node{Id: pluginNode, Name: "client-2", Status: pb.NodeStatus_NODE_STATUS_READY,
		CsiControllerPlugins: map[string]*pb.CSIPluginInfo{"aws-ebs0": {Healthy: true, Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1"}},
		CsiNodePlugins: map[string]*pb.CSIPluginInfo{
			"aws-ebs0": {Healthy: false, Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1", HealthDescription: "probe timed out"},
			"nfs":      {Healthy: true},
		}}
	f.nodes[pluginNode] = n
	wantOut(t, []string{"node", "status", "-address", f.url, "7e1a"}, 0,
		"CSI Plugins\nID        Type        Healthy  Provider         Version  Description\n"+
			"aws-ebs0  controller  true     ebs.csi.aws.com  1.29.1   \n"+
			"aws-ebs0  node        false    ebs.csi.aws.com  1.29.1   probe timed out\n"+
			"nfs       node        true     -                -        \n")
	f.nodes[pluginNode] = &pb.Node{Id: pluginNode, Name: "client-2", Status: pb.NodeStatus_NODE_STATUS_READY}
	if out := wantOut(t, []string{"node", "status", "-address", f.url, "7e1a"}, 0); strings.Contains(out, "CSI Plugins") {
		t.Fatalf("a node without plugins shows a CSI section:\n%s", out)
	}
}
