package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

func withVersion(v string) clusterOpt { return func(c *testConfig) { c.Version = v } }

// updateCSI sends a node's plugin set, retrying while the servers have not
// yet recorded their versions (the table rule's FailedPrecondition).
func updateCSI(t *testing.T, c pb.CSIPluginsClient, req *pb.NodeCSIUpdateRequest) *pb.NodeCSIUpdateResponse {
	t.Helper()
	var resp *pb.NodeCSIUpdateResponse
	testutil.WaitFor(t, 10*time.Second, func() error {
		var err error
		resp, err = c.UpdateNode(ctx10s(t), req)
		if status.Code(err) == codes.FailedPrecondition {
			return err
		}
		if err != nil {
			t.Fatalf("UpdateNode: %v", err)
		}
		return nil
	})
	return resp
}

func TestCSIPluginReportedByNodesIsListedWithItsCounts(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.servers[0]
	csi := pb.NewCSIPluginsClient(tc.conn(s))
	n1, n2 := testNode("n1"), testNode("n2")
	for _, n := range []*pb.Node{n1, n2} {
		if _, err := tc.register(s, n); err != nil {
			t.Fatal(err)
		}
	}
	// n1 runs a controller and a node instance of an adapter (no allocs),
	// n2 a node instance.
	updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n1.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"nfs": {Healthy: true, Provider: "nfs.csi.k8s.io", ProviderVersion: "4.0", ControllerRequired: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"nfs": {Healthy: true, Provider: "nfs.csi.k8s.io", ProviderVersion: "4.0"}},
	})
	updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n2.GetId(),
		Nodes: map[string]*pb.CSIPluginInfo{"nfs": {Healthy: false, HealthDescription: "probe failed"}},
	})

	list, err := csi.List(ctx10s(t), &pb.CSIPluginListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetPlugins()) != 1 {
		t.Fatalf("listed %d plugins, want 1: %v", len(list.GetPlugins()), list.GetPlugins())
	}
	p := list.GetPlugins()[0]
	if p.GetId() != "nfs" || p.GetProvider() != "nfs.csi.k8s.io" || p.GetVersion() != "4.0" || !p.GetControllerRequired() || !p.GetSchedulable() ||
		p.GetControllersHealthy() != 1 || p.GetControllersExpected() != 1 || p.GetNodesHealthy() != 1 || p.GetNodesExpected() != 2 {
		t.Fatalf("listed %v, want nfs 1/1 controllers, 1/2 nodes, provider nfs.csi.k8s.io 4.0, controller required, schedulable", p)
	}
	if len(p.GetNodes()) != 0 || len(p.GetControllers()) != 0 {
		t.Errorf("a list carries the instances: %v", p)
	}
	got, err := csi.Get(ctx10s(t), &pb.CSIPluginGetRequest{PluginId: "nfs"})
	if err != nil {
		t.Fatal(err)
	}
	if inst := got.GetPlugin().GetNodes()[n2.GetId()]; inst == nil || inst.GetHealthy() || inst.GetType() != pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE {
		t.Errorf("n2's node instance = %v, want unhealthy, typed node", inst)
	}
	if inst := got.GetPlugin().GetControllers()[n1.GetId()]; inst.GetType() != pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER || inst.GetPluginId() != "nfs" {
		t.Errorf("n1's controller instance = %v, want typed controller, plugin nfs", inst)
	}
	node, err := s.State().NodeByID(nil, n1.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if len(node.GetCsiControllerPlugins()) != 1 || len(node.GetCsiNodePlugins()) != 1 {
		t.Errorf("n1 carries %v / %v, want its controller and node instance", node.GetCsiControllerPlugins(), node.GetCsiNodePlugins())
	}

	// A blocking Get wakes when n1's controller turns unhealthy: the plugin
	// is then not schedulable (a controller is required).
	type result struct {
		resp *pb.CSIPluginGetResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := csi.Get(context.Background(), &pb.CSIPluginGetRequest{PluginId: "nfs",
			Query: &pb.QueryOptions{MinIndex: got.GetMeta().GetIndex(), MaxWaitMs: 30_000}})
		done <- result{r, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("blocking Get returned before any change: %v %v", r.resp, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n1.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"nfs": {Healthy: false, Provider: "nfs.csi.k8s.io", ProviderVersion: "4.0", ControllerRequired: true}},
		Nodes:       map[string]*pb.CSIPluginInfo{"nfs": {Healthy: true, Provider: "nfs.csi.k8s.io", ProviderVersion: "4.0"}},
	})
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if p := r.resp.GetPlugin(); p.GetSchedulable() || p.GetControllersHealthy() != 0 || r.resp.GetMeta().GetIndex() <= got.GetMeta().GetIndex() {
			t.Fatalf("woke with %v at index %d, want 0 healthy controllers, not schedulable, past %d", p, r.resp.GetMeta().GetIndex(), got.GetMeta().GetIndex())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking Get did not wake on the plugin's change")
	}

	// Both nodes report nothing: the plugin is gone.
	for _, n := range []*pb.Node{n1, n2} {
		updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n.GetId()})
	}
	if _, err := csi.Get(ctx10s(t), &pb.CSIPluginGetRequest{PluginId: "nfs"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of a plugin no node runs: %v, want NotFound", err)
	}
}

func TestCSIPluginUpdateRefusals(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.servers[0]
	csi := pb.NewCSIPluginsClient(tc.conn(s))
	n := testNode("n1")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n.GetId()}) // versions recorded
	for _, tt := range []struct {
		name string
		req  *pb.NodeCSIUpdateRequest
		code codes.Code
	}{
		{"bad node id", &pb.NodeCSIUpdateRequest{NodeId: "n1"}, codes.InvalidArgument},
		{"unknown node", &pb.NodeCSIUpdateRequest{NodeId: testNode("x").GetId()}, codes.NotFound},
		{"empty plugin ID", &pb.NodeCSIUpdateRequest{NodeId: n.GetId(), Nodes: map[string]*pb.CSIPluginInfo{"": {}}}, codes.InvalidArgument},
		{"plugin ID not its key", &pb.NodeCSIUpdateRequest{NodeId: n.GetId(), Controllers: map[string]*pb.CSIPluginInfo{"nfs": {PluginId: "ebs"}}}, codes.InvalidArgument},
	} {
		_, err := csi.UpdateNode(ctx10s(t), tt.req)
		if status.Code(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
	if _, err := csi.Get(ctx10s(t), &pb.CSIPluginGetRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Get without an ID: %v, want InvalidArgument", err)
	}
}

// A server that runs a version older than the table keeps NodeCSIUpdate
// from being proposed: FailedPrecondition, naming it. (A server always
// records a version: Config.Version defaults to berth's.)
func TestCSIPluginUpdateWaitsForEveryServersVersion(t *testing.T) {
	n := testNode("n1")
	tc2 := newTestCluster(t, 1, withVersion("0.0.9"))
	s2 := tc2.servers[0]
	if _, err := tc2.register(s2, n); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		_, err := pb.NewCSIPluginsClient(tc2.conn(s2)).UpdateNode(ctx10s(t), &pb.NodeCSIUpdateRequest{NodeId: n.GetId()})
		if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "runs 0.0.9; upgrade it") {
			return errors.New("UpdateNode with a 0.0.9 server: " + st.String())
		}
		return nil
	})
}

func TestCSIPluginsMethodsHaveRoutes(t *testing.T) {
	for _, m := range methodNames(pb.CSIPlugins_ServiceDesc.Methods) {
		full := "/" + pb.CSIPlugins_ServiceDesc.ServiceName + "/" + m
		if _, ok := routes[full]; !ok {
			t.Errorf("%s has no forwarding route", full)
		}
		if _, err := newReply(full); err != nil {
			t.Errorf("newReply(%s): %v", full, err)
		}
	}
}

// TestCSIPluginExpectedCountsFollowThePluginJobsAllocs: a job whose task
// is a monolith plugin is placed by the scheduler before any node reports
// the plugin; the first report creates the row with that alloc expected on
// both sides; stopping the job takes it out again.
func TestCSIPluginExpectedCountsFollowThePluginJobsAllocs(t *testing.T) {
	tc := newTestCluster(t, 1, withVersion(version.Version))
	s := tc.servers[0]
	csi := pb.NewCSIPluginsClient(tc.conn(s))
	n := workNode("n1")
	if _, err := tc.register(s, n); err != nil {
		t.Fatal(err)
	}
	job := serviceJob("plugin-ebs", 1)
	job.Groups[0].Tasks[0].CsiPlugin = &pb.CSIPluginConfig{Id: "ebs", Type: "monolith"}
	if _, err := pb.NewJobsClient(tc.conn(s)).Register(ctx10s(t), &pb.JobRegisterRequest{Job: job}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocs(t, tc, s, job.GetId(), 1, nil)[0]
	if _, err := csi.Get(ctx10s(t), &pb.CSIPluginGetRequest{PluginId: "ebs"}); status.Code(err) != codes.NotFound {
		t.Fatalf("plugin before any report: %v, want NotFound (only reports create rows)", err)
	}
	info := &pb.CSIPluginInfo{AllocId: alloc.GetId(), Healthy: true, Provider: "ebs.csi.aws.com", ProviderVersion: "1.29.1"}
	updateCSI(t, csi, &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
		Controllers: map[string]*pb.CSIPluginInfo{"ebs": info}, Nodes: map[string]*pb.CSIPluginInfo{"ebs": info}})
	got, err := csi.Get(ctx10s(t), &pb.CSIPluginGetRequest{PluginId: "ebs"})
	if err != nil {
		t.Fatal(err)
	}
	p := got.GetPlugin()
	if p.GetControllersHealthy() != 1 || p.GetControllersExpected() != 1 || p.GetNodesHealthy() != 1 || p.GetNodesExpected() != 1 ||
		len(p.GetAllocations()) != 1 || p.GetAllocations()[0].GetAllocId() != alloc.GetId() || !p.GetAllocations()[0].GetHealthy() ||
		p.GetAllocations()[0].GetType() != pb.CSIPluginType_CSI_PLUGIN_TYPE_MONOLITH {
		t.Fatalf("plugin after the report: %v, want 1/1 both sides and the monolith alloc %s, healthy", p, alloc.GetId())
	}

	if _, err := pb.NewJobsClient(tc.conn(s)).Deregister(ctx10s(t), &pb.JobDeregisterRequest{JobId: job.GetId()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		got, err := csi.Get(ctx10s(t), &pb.CSIPluginGetRequest{PluginId: "ebs"})
		if err != nil {
			return err
		}
		if p := got.GetPlugin(); len(p.GetAllocations()) != 0 || p.GetControllersExpected() != 0 || p.GetNodesExpected() != 0 {
			return errors.New("after the stop the plugin still expects its alloc: " + p.String())
		}
		return nil
	})
}

// While a server records a version older than pluginFactsSince, a plugin
// update is proposed without derive_from_serving and its row keeps the
// older rule; once every server is at it, the update marks the row.
func TestCSIPluginUpdateDerivesFromServingOnlyWhenEveryServerKnowsTheRule(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{{endpoints.CSIPluginsSinceVersion, false}, {endpoints.PluginFactsSinceVersion, true}} {
		n := testNode("n1")
		c := newTestCluster(t, 1, withVersion(tc.version))
		s := c.servers[0]
		if _, err := c.register(s, n); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			_, err := pb.NewCSIPluginsClient(c.conn(s)).UpdateNode(ctx10s(t), &pb.NodeCSIUpdateRequest{NodeId: n.GetId(),
				Nodes: map[string]*pb.CSIPluginInfo{"nfs": {Healthy: true, Provider: "nfs.csi.k8s.io"}}})
			return err
		})
		p, err := s.fsm.State().CSIPluginByID(nil, "nfs")
		if err != nil || p == nil {
			t.Fatalf("servers at %s: plugin row %v (%v)", tc.version, p, err)
		}
		if p.GetDerivedFromServing() != tc.want {
			t.Errorf("servers at %s: derived_from_serving=%v, want %v", tc.version, p.GetDerivedFromServing(), tc.want)
		}
	}
}
