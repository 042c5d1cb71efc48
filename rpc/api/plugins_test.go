package api

import (
	"context"
	"testing"
)

// TestCSIPluginMethods: List is a page with its filters; Info reads
// Nomad's /v1/plugin/csi/{id} path, the ID escaped once, and decodes the
// plugin whole.
func TestCSIPluginMethods(t *testing.T) {
	rec, c := newRecorder(t)
	ctx := context.Background()
	rec.reply["GET /v1/plugins"] = `[{"id": "ebs", "nodes_healthy": 2, "nodes_expected": 3}, {"id": "ebs-2"}]`
	list, meta, err := c.CSIPlugins().List(ctx, &QueryOptions{PerPage: 2, Params: map[string]string{"prefix": "ebs"}, WaitIndex: 5})
	if err != nil || len(list) != 2 || list[0].GetNodesHealthy() != 2 || list[0].GetNodesExpected() != 3 || meta.LastIndex != 7 {
		t.Fatalf("List = %v %v %v", list, meta, err)
	}
	if got, want := rec.last(), "GET /v1/plugins?index=5&per_page=2&prefix=ebs"; got != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
	rec.reply["GET /v1/plugin/csi/team%2Febs"] = `{"id": "team/ebs", "controller_required": true, "schedulable": true,
		"nodes": {"n1": {"plugin_id": "team/ebs", "healthy": true, "provider": "ebs.csi.aws.com"}},
		"allocations": [{"alloc_id": "a1", "node_id": "n1", "type": "node", "healthy": true}]}`
	p, _, err := c.CSIPlugins().Info(ctx, "team/ebs", nil)
	if err != nil || p.GetId() != "team/ebs" || !p.GetControllerRequired() || !p.GetNodes()["n1"].GetHealthy() ||
		len(p.GetAllocations()) != 1 || p.GetAllocations()[0].GetAllocId() != "a1" {
		t.Fatalf("Info = %v, %v", p, err)
	}
	if got, want := rec.last(), "GET /v1/plugin/csi/team%2Febs"; got != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
}
