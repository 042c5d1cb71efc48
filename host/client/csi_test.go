package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/fsm"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/host/server"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/taskdrivers"
)

var _ registry.Store = (*state.DB)(nil)

// csiNode starts a client on dir with a CSI registry on its state DB.
func csiNode(t *testing.T, dir, server string, db *state.DB, m *taskdrivers.Manager, name string) (*Client, *registry.Registry) {
	t.Helper()
	reg := registry.New(db, registry.WithLogger(testutil.Logger(t).Named(name+"-registry")))
	c, err := New(Config{DataDir: dir, NodeName: "csi-node", Servers: []string{server}, Logger: testutil.Logger(t).Named(name),
		Drivers: m.DriverInfos, DriversChanged: m.Changed(), TaskDrivers: ManagerDrivers(m), State: db, CSIRegistry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c, reg
}

// A plugin task's registration reaches the servers' plugin table, with its
// alloc and fingerprint; a restarted client, whose registry is restored
// from the state DB, keeps it there without the plugin registering again.
func TestCSIPluginReachesTheServersAndSurvivesAClientRestart(t *testing.T) {
	s := startServer(t)
	addr := serverRPC(t, s)
	pool := rpc.NewPool()
	t.Cleanup(pool.Close)
	conn, err := pool.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	plugins := pb.NewCSIPluginsClient(conn)

	sockDir, err := os.MkdirTemp("", "csic")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	// A node plugin that needs no controller (no attach step), so one
	// healthy node instance makes it schedulable.
	fake := csifake.New()
	fake.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{}, nil)
	srv, err := fake.Listen(filepath.Join(sockDir, "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	dir := t.TempDir()
	db, m := driversFor(t, dir)
	c, reg := csiNode(t, dir, addr, db, m, "client")
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Shutdown()
		}
	})
	waitStatus(t, s, c.NodeID(), pb.NodeStatus_NODE_STATUS_READY)

	// The plugin's job, placed by the scheduler on this node: a task that
	// runs until stopped, as a plugin task does.
	job := mockJob(pb.JobType_JOB_TYPE_SERVICE, &pb.Task{Name: "plugin", Driver: "mock",
		CsiPlugin: &pb.CSIPluginConfig{Id: "fake", Type: "node"}, Resources: &pb.TaskResources{CpuMhz: 100, MemoryMb: 64}})
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	if _, err := pb.NewJobsClient(conn).Register(ctx, &pb.JobRegisterRequest{Job: job}); err != nil {
		t.Fatal(err)
	}
	var allocID string
	testutil.WaitFor(t, generous, func() error {
		for id := range c.knownAllocs() {
			if _, states, err := c.AllocStates(id); err == nil &&
				states["plugin"].GetState() == pb.TaskLifecycleState_TASK_LIFECYCLE_STATE_RUNNING {
				allocID = id
				return nil
			}
		}
		return errors.New("the plugin task is not running yet")
	})

	// What the supervisor hook does once the plugin is healthy.
	if err := reg.Register(&pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, PluginId: "fake", AllocId: allocID,
		Endpoint: srv.Endpoint, Provider: csifake.Name, ProviderVersion: csifake.VendorVersion, Healthy: true}); err != nil {
		t.Fatal(err)
	}
	healthyOnServers := func(after time.Time) *pb.CSIPlugin {
		t.Helper()
		var p *pb.CSIPlugin
		testutil.WaitFor(t, 15*time.Second, func() error {
			resp, err := plugins.Get(ctx, &pb.CSIPluginGetRequest{PluginId: "fake"})
			if err != nil {
				return err
			}
			p = resp.GetPlugin()
			inst := p.GetNodes()[c.NodeID()]
			switch {
			case p.GetNodesHealthy() != 1 || p.GetNodesExpected() != 1 || !p.GetSchedulable():
				return fmt.Errorf("plugin %v: want 1/1 healthy nodes, schedulable", p)
			case inst.GetAllocId() != allocID || inst.GetProvider() != csifake.Name || inst.GetNodeInfo().GetId() != csifake.NodeID:
				return fmt.Errorf("node instance %v: want alloc %s and the fingerprint", inst, allocID)
			case time.Unix(0, inst.GetUpdatedAt()).Before(after):
				return fmt.Errorf("node instance updated at %s, before %s: not reported by this client yet", time.Unix(0, inst.GetUpdatedAt()), after)
			case len(p.GetAllocations()) != 1 || p.GetAllocations()[0].GetAllocId() != allocID || !p.GetAllocations()[0].GetHealthy():
				return fmt.Errorf("allocations %v", p.GetAllocations())
			}
			return nil
		})
		return p
	}
	healthyOnServers(time.Time{})

	// The client restarts; the plugin task and its entry live on. An entry
	// of an alloc the client no longer runs (left by a crash) is dropped.
	c.Shutdown()
	stopped = true
	if err := db.PutCSIPluginRegistrations(&pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE,
		PluginId: "other", AllocId: "gone-alloc", Endpoint: srv.Endpoint, Healthy: true}); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	c2, reg2 := csiNode(t, dir, addr, db, m, "client2")
	t.Cleanup(c2.Shutdown)
	if e, ok := reg2.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, "fake"); !ok || !e.NeedsProbe || e.Registration.GetAllocId() != allocID {
		t.Fatalf("restored registry serves %v, %v; want alloc %s's entry, to be probed", e, ok, allocID)
	}
	if _, ok := reg2.Serving(pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, "other"); ok {
		t.Fatal("the entry of an alloc the client does not run was restored")
	}
	if recs, err := db.CSIPluginRegistrations(); err != nil || len(recs) != 1 || recs[0].GetAllocId() != allocID {
		t.Fatalf("stored registrations after the restore: %v, %v; want only alloc %s's", recs, err, allocID)
	}
	healthyOnServers(restarted)

	// Servers that forget the node (a snapshot restore, a deregister) get
	// its plugins again with its new registration.
	buf, err := fsm.Encode(fsm.NodeDeregister, &pb.NodeDeregisterCommand{NodeId: c2.NodeID()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.ResultOf(ctx, s.Raft().Apply(buf, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// The apply is done on the only server: the instance is gone now.
	if inst := mustPlugin(t, plugins, ctx).GetNodes()[c2.NodeID()]; inst != nil {
		t.Fatalf("deregistered node's instance still in the table: %v", inst)
	}
	waitStatus(t, s, c2.NodeID(), pb.NodeStatus_NODE_STATUS_READY)
	healthyOnServers(time.Time{})

	// Once the plugin's entry goes (its task stopped), the servers drop it.
	if err := reg2.Deregister(allocID, "fake"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, generous, func() error {
		resp, err := plugins.Get(ctx, &pb.CSIPluginGetRequest{PluginId: "fake"})
		if status.Code(err) == codes.NotFound {
			return nil // no instance and no alloc running it: the row is gone
		}
		if err != nil {
			return err
		}
		if inst := resp.GetPlugin().GetNodes()[c2.NodeID()]; inst != nil {
			return fmt.Errorf("node instance still reported: %v", inst)
		}
		return nil
	})
}

func mustPlugin(t *testing.T, plugins pb.CSIPluginsClient, ctx context.Context) *pb.CSIPlugin {
	t.Helper()
	resp, err := plugins.Get(ctx, &pb.CSIPluginGetRequest{PluginId: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetPlugin()
}

// BenchmarkCSIRegisterToServers measures the client's and the servers'
// share of "plugin task healthy → schedulable": from registry.Register
// (the supervisor hook's last step) to the servers' plugin table holding
// the instance healthy — fingerprint, UpdateNode, the raft apply. One
// server; reported as p50 and p99 in ms.
func BenchmarkCSIRegisterToServers(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s, err := server.New(&server.Config{Name: "s1", RPCAddr: lis.Addr().String(), RaftAddr: "127.0.0.1:0",
		RaftTimeoutScale: 0.2, Logger: hclog.NewNullLogger()}, lis)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	for !s.IsLeader() {
		time.Sleep(5 * time.Millisecond)
	}
	sockDir, err := os.MkdirTemp("", "csib")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	fake := csifake.New()
	fake.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{}, nil)
	srv, err := fake.Listen(filepath.Join(sockDir, "csi.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	dir := b.TempDir()
	db, err := state.Open(state.Path(dir))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	reg := registry.New(db)
	c, err := New(Config{DataDir: dir, Servers: []string{lis.Addr().String()}, Logger: hclog.NewNullLogger(), CSIRegistry: reg})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Shutdown()
	for !c.Registered() {
		time.Sleep(5 * time.Millisecond)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := range b.N {
		alloc := fmt.Sprintf("a%d", i)
		start := time.Now()
		if err := reg.Register(&pb.CSIPluginRegistration{Type: pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE, PluginId: "p", AllocId: alloc,
			Endpoint: srv.Endpoint, Healthy: true, AllocCreateIndex: uint64(i + 1)}); err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(generous); ; time.Sleep(200 * time.Microsecond) {
			p, err := s.State().CSIPluginByID(nil, "p")
			if err != nil {
				b.Fatal(err)
			}
			if inst := p.GetNodes()[c.NodeID()]; inst.GetAllocId() == alloc && inst.GetHealthy() && p.GetSchedulable() {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("alloc %s's plugin never reached the table: %v", alloc, p)
			}
		}
		lat = append(lat, time.Since(start))
		if err := reg.Deregister(alloc, "p"); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
}
