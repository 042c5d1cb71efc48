package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/api"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
)

// fakeCSIPlugins serves the plugin table from fakeState's lock and index.
type fakeCSIPlugins struct {
	pb.UnimplementedCSIPluginsServer
	s       *fakeState
	plugins map[string]*pb.CSIPlugin // under s.mu
}

var _ pb.CSIPluginsServer = (*fakeCSIPlugins)(nil)

// put stores a plugin, moving the index.
func (f *fakeCSIPlugins) put(p *pb.CSIPlugin) uint64 {
	return f.s.update(func() { f.plugins[p.GetId()] = p })
}

func (f *fakeCSIPlugins) List(ctx context.Context, req *pb.CSIPluginListRequest) (*pb.CSIPluginListResponse, error) {
	if err := f.s.record("CSIPlugins.List", req); err != nil {
		return nil, err
	}
	var page []*pb.CSIPlugin
	var next string
	var err error
	idx := f.s.read(ctx, req.GetQuery(), func() {
		page, next, err = pageOf(mapValues(f.plugins, func(p *pb.CSIPlugin) bool { return strings.HasPrefix(p.GetId(), req.GetPrefix()) }),
			(*pb.CSIPlugin).GetId, req.GetQuery())
	})
	return &pb.CSIPluginListResponse{Plugins: page, Meta: &pb.QueryMeta{Index: idx, NextToken: next}}, err
}

func (f *fakeCSIPlugins) Get(ctx context.Context, req *pb.CSIPluginGetRequest) (*pb.CSIPluginGetResponse, error) {
	if err := f.s.record("CSIPlugins.Get", req); err != nil {
		return nil, err
	}
	var p *pb.CSIPlugin
	idx := f.s.read(ctx, req.GetQuery(), func() { p = f.plugins[req.GetPluginId()] })
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "CSI plugin %q not found", req.GetPluginId())
	}
	return &pb.CSIPluginGetResponse{Plugin: p, Meta: &pb.QueryMeta{Index: idx}}, nil
}

func testPlugin(id string, healthy int32) *pb.CSIPlugin {
	return &pb.CSIPlugin{Id: id, Provider: "ebs.csi.aws.com", Version: "1.2", NodesHealthy: healthy, NodesExpected: 2,
		Nodes: map[string]*pb.CSIPluginInfo{"n1": {PluginId: id, Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, Healthy: true}}}
}

// TestPluginListIsPagedAndBlocks pages /v1/plugins with a prefix, accepts
// ?type=csi and refuses other types, and holds a blocking query until the
// table changes.
func TestPluginListIsPagedAndBlocks(t *testing.T) {
	f := newFakeServers(t)
	for i := range 5 {
		f.plugins.put(testPlugin(fmt.Sprintf("ebs-%d", i), 1))
	}
	f.plugins.put(testPlugin("nfs", 1))

	r := call(t, f.url, "GET", "/v1/plugins?type=csi&per_page=2&prefix=ebs-", "")
	page, err := apijson.UnmarshalList(r.body, func() *pb.CSIPlugin { return &pb.CSIPlugin{} })
	if r.status != http.StatusOK || err != nil || len(page) != 2 || page[0].GetId() != "ebs-0" || r.header.Get(HeaderNextToken) != "ebs-2" {
		t.Fatalf("first page: %d %s %v, next %q", r.status, r.body, err, r.header.Get(HeaderNextToken))
	}
	if !strings.Contains(string(r.body), `"nodes_healthy": 1`) || !strings.Contains(string(r.body), `"nodes_expected": 2`) {
		t.Errorf("list body lacks the snake-case counts: %s", r.body)
	}
	if q := f.state.requests("CSIPlugins.List")[0].(*pb.CSIPluginListRequest); q.GetPrefix() != "ebs-" || q.GetQuery().GetPerPage() != 2 {
		t.Fatalf("list request = %v", q)
	}
	if r := call(t, f.url, "GET", "/v1/plugins?type=host", ""); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `type=\"host\"`) {
		t.Fatalf("type=host: %d %s, want 400 naming the type", r.status, r.body)
	}

	c, err := api.NewClient(f.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []string
	for p, err := range api.Pages(ctx, &api.QueryOptions{PerPage: 2}, c.CSIPlugins().List) {
		if err != nil {
			t.Fatal(err)
		}
		for _, pl := range p.Items {
			ids = append(ids, pl.GetId())
		}
	}
	if want := []string{"ebs-0", "ebs-1", "ebs-2", "ebs-3", "ebs-4", "nfs"}; !slices.Equal(ids, want) {
		t.Fatalf("all pages: %v, want %v", ids, want)
	}

	_, meta, err := c.CSIPlugins().List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		plugins []*pb.CSIPlugin
		meta    *api.QueryMeta
		err     error
	}
	done := make(chan result, 1)
	go func() {
		ps, m, err := c.CSIPlugins().List(ctx, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: 60e9})
		done <- result{ps, m, err}
	}()
	<-f.state.waiting
	f.plugins.put(testPlugin("late", 0))
	res := <-done
	if res.err != nil || res.meta.LastIndex <= meta.LastIndex || !slices.ContainsFunc(res.plugins, func(p *pb.CSIPlugin) bool { return p.GetId() == "late" }) {
		t.Fatalf("blocking list returned %v at %d (blocked at %d), %v", res.plugins, res.meta.LastIndex, meta.LastIndex, res.err)
	}
}

// TestPluginGetServesBothPaths: /v1/plugin/csi/{id} (Nomad's) and
// /v1/plugin/{id} read the same plugin; an unknown one is 404.
func TestPluginGetServesBothPaths(t *testing.T) {
	f := newFakeServers(t)
	want := testPlugin("ebs", 1)
	f.plugins.put(want)
	for _, path := range []string{"/v1/plugin/csi/ebs", "/v1/plugin/ebs"} {
		got := &pb.CSIPlugin{}
		call(t, f.url, "GET", path, "").wantOK(t, got)
		if !proto.Equal(got, want) {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	if r := call(t, f.url, "GET", "/v1/plugin/csi/nope", ""); r.status != http.StatusNotFound {
		t.Fatalf("unknown plugin: %d %s, want 404", r.status, r.body)
	}
	if q := f.state.requests("CSIPlugins.Get"); len(q) != 3 || q[1].(*pb.CSIPluginGetRequest).GetPluginId() != "ebs" {
		t.Fatalf("get requests = %v", q)
	}
}
