package pluginmanager

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

func mustRegister(t *testing.T, r *registry.Registry, reg *pb.CSIPluginRegistration) {
	t.Helper()
	if err := r.Register(reg); err != nil {
		t.Fatal(err)
	}
}

func TestNewRequiresASender(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New without Send: %v, want ErrInvalidConfig", err)
	}
}

// A plugin registered by its task reaches the servers with its
// fingerprint; its health changes and its deregistration are sent too.
func TestRegisteredPluginIsSentWithItsFingerprint(t *testing.T) {
	p := csifake.New()
	p.NodeGetInfo.Always(&csipb.NodeGetInfoResponse{NodeId: "n-7", MaxVolumesPerNode: 12,
		AccessibleTopology: &csipb.Topology{Segments: map[string]string{"zone": "z1"}}}, nil)
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, nil)

	// Nothing runs yet: the empty set is sent, so servers drop what a
	// previous run of the node reported.
	f.waitDelivered(t, "empty set at start", func(s Set) error {
		if len(s.Controllers)+len(s.Nodes) != 0 {
			return errors.New("not empty")
		}
		return nil
	})

	mustRegister(t, reg, registration(node, "hostpath", "a1", srv.Endpoint, 10))
	got := f.waitDelivered(t, "registered", func(s Set) error { return has(s.Nodes, "hostpath", "a1", true) })
	if len(got.Controllers) != 0 {
		t.Fatalf("a node plugin was reported as a controller: %v", render(got))
	}
	info := got.Nodes["hostpath"]
	if info.GetProvider() != csifake.Name || info.GetProviderVersion() != csifake.VendorVersion ||
		info.GetSource() != taskSource || info.GetType() != node || info.GetPluginId() != "hostpath" {
		t.Errorf("instance = %v", info)
	}
	if ni := info.GetNodeInfo(); ni.GetId() != "n-7" || ni.GetMaxVolumes() != 12 || ni.GetAccessibleTopology()["zone"] != "z1" || !ni.GetRequiresNodeStageVolume() {
		t.Errorf("node info = %v, want NodeGetInfo's answer and staging", ni)
	}
	// The fake has a controller service that publishes: attach first.
	if !info.GetControllerRequired() || !info.GetRequiresControllerPlugin() || !info.GetControllerInfo().GetSupportsAttachDetach() {
		t.Errorf("controller fields = required %v, requires plugin %v, %v", info.GetControllerRequired(), info.GetRequiresControllerPlugin(), info.GetControllerInfo())
	}
	if info.GetUpdatedAt() == 0 {
		t.Error("updated_at not set")
	}

	if err := reg.SetHealth("a1", "hostpath", false, "probe: deadline exceeded"); err != nil {
		t.Fatal(err)
	}
	got = f.waitDelivered(t, "unhealthy", func(s Set) error { return has(s.Nodes, "hostpath", "a1", false) })
	if d := got.Nodes["hostpath"].GetHealthDescription(); d != "probe: deadline exceeded" {
		t.Errorf("health description %q, want the supervisor's reason", d)
	}
	if got.Nodes["hostpath"].GetUpdatedAt() <= info.GetUpdatedAt() {
		t.Errorf("updated_at %d did not move with the health (was %d)", got.Nodes["hostpath"].GetUpdatedAt(), info.GetUpdatedAt())
	}
	if err := reg.SetHealth("a1", "hostpath", true, ""); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "healthy again", func(s Set) error { return has(s.Nodes, "hostpath", "a1", true) })

	if err := reg.Deregister("a1", "hostpath"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "deregistered", func(s Set) error {
		if len(s.Nodes)+len(s.Controllers) != 0 {
			return errors.New("still reported")
		}
		return nil
	})
}

func TestMonolithIsReportedOnBothSides(t *testing.T) {
	srv := servePlugin(t, csifake.New())
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, nil)
	mustRegister(t, reg, registration(monolith, "hostpath", "a1", srv.Endpoint, 10))
	got := f.waitDelivered(t, "monolith", func(s Set) error {
		if err := has(s.Controllers, "hostpath", "a1", true); err != nil {
			return err
		}
		return has(s.Nodes, "hostpath", "a1", true)
	})
	for _, info := range []*pb.CSIPluginInfo{got.Controllers["hostpath"], got.Nodes["hostpath"]} {
		if info.GetType() != monolith {
			t.Errorf("type %s, want monolith", info.GetType())
		}
	}
	if !got.Controllers["hostpath"].GetControllerInfo().GetSupportsCreateDelete() {
		t.Errorf("controller info %v", got.Controllers["hostpath"].GetControllerInfo())
	}
	// A monolith's two entries are one set: no set with only one side of
	// it was ever sent.
	for _, s := range f.delivered() {
		if (s.Controllers["hostpath"] == nil) != (s.Nodes["hostpath"] == nil) {
			t.Fatalf("half a monolith sent: %v", render(s))
		}
	}
}

// Of two allocs of one plugin (an update), the newest healthy one is
// reported, as the registry's Serving says.
func TestNewestHealthyAllocIsReported(t *testing.T) {
	oldSrv, newSrv := servePlugin(t, csifake.New()), servePlugin(t, csifake.New())
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, nil)
	mustRegister(t, reg, registration(node, "p", "old", oldSrv.Endpoint, 10))
	f.waitDelivered(t, "old alone", func(s Set) error { return has(s.Nodes, "p", "old", true) })
	mustRegister(t, reg, registration(node, "p", "new", newSrv.Endpoint, 20))
	f.waitDelivered(t, "new registered", func(s Set) error { return has(s.Nodes, "p", "new", true) })
	if err := reg.SetHealth("new", "p", false, "not ready"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "new unhealthy", func(s Set) error { return has(s.Nodes, "p", "old", true) })
	if err := reg.SetHealth("new", "p", true, ""); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "new healthy again", func(s Set) error { return has(s.Nodes, "p", "new", true) })
	if err := reg.Deregister("new", "p"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "new stopped", func(s Set) error { return has(s.Nodes, "p", "old", true) })
	// Never were both reported: one instance per plugin and side.
	for _, s := range f.delivered() {
		if len(s.Nodes) > 1 {
			t.Fatalf("set with %d node instances: %v", len(s.Nodes), render(s))
		}
	}
}

func TestAdapterHealthEventsAreSent(t *testing.T) {
	ctlOnly := csifake.New()
	ctlOnly.NodeGetCapabilities.Always(nil, status.Error(codes.Unimplemented, "no node service"))
	ad := newFakeAdapters(t, map[string]*csifake.Plugin{"hostpath": csifake.New(), "ctl": ctlOnly})
	_, f := startManager(t, nil, ad, nil)
	got := f.waitDelivered(t, "adapters", func(s Set) error {
		if err := has(s.Controllers, "hostpath", "", true); err != nil {
			return err
		}
		if err := has(s.Nodes, "hostpath", "", true); err != nil {
			return err
		}
		return has(s.Controllers, "ctl", "", true)
	})
	if got.Nodes["ctl"] != nil {
		t.Errorf("a controller-only adapter was reported as a node plugin: %v", got.Nodes["ctl"])
	}
	if h := got.Nodes["hostpath"]; h.GetSource() != adSource || h.GetType() != monolith {
		t.Errorf("hostpath adapter: source %s type %s, want adapter monolith", h.GetSource(), h.GetType())
	}
	if c := got.Controllers["ctl"]; c.GetType() != controller {
		t.Errorf("ctl adapter type %s, want controller", c.GetType())
	}

	ad.event("hostpath", AdapterExited, "exit status 2")
	got = f.waitDelivered(t, "exited", func(s Set) error { return has(s.Nodes, "hostpath", "", false) })
	if d := got.Nodes["hostpath"].GetHealthDescription(); d != "storage adapter: exited: exit status 2" {
		t.Errorf("health description %q", d)
	}
	if err := has(got.Controllers, "ctl", "", true); err != nil {
		t.Errorf("the other adapter: %v", err)
	}
	ad.event("hostpath", AdapterHealthy, "")
	f.waitDelivered(t, "healthy again", func(s Set) error { return has(s.Nodes, "hostpath", "", true) })
}

// A failing send (the version gate's FailedPrecondition, no leader) is
// retried until delivered, and what is delivered is the newest set; a set
// never follows a newer one.
func TestFailedSendsAreRetriedWithTheNewestSet(t *testing.T) {
	srvs := []string{servePlugin(t, csifake.New()).Endpoint, servePlugin(t, csifake.New()).Endpoint}
	reg := registry.New(newMemStore())
	gate := status.Error(codes.FailedPrecondition, "CSI plugin updates need every server at berth 0.1.0-dev or later")
	f2 := newFakeSender()
	f2.failNext(gate, gate, gate, status.Error(codes.Unavailable, "no leader"), gate)
	m2, err := New(Config{Registry: reg, Send: f2.send, SendRetryStart: 2 * time.Millisecond, SendRetryMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m2.Start()
	t.Cleanup(m2.Stop)
	mustRegister(t, reg, registration(node, "a", "a1", srvs[0], 1))
	mustRegister(t, reg, registration(controller, "b", "a2", srvs[1], 2))
	f2.waitDelivered(t, "both", func(s Set) error {
		if err := has(s.Nodes, "a", "a1", true); err != nil {
			return err
		}
		return has(s.Controllers, "b", "a2", true)
	})
	all := f2.all()
	failures := 0
	for i, a := range all {
		if a.err != nil {
			failures++
		}
		// Plugins are only added here: a set with fewer than one sent
		// before it is stale.
		if i > 0 && len(a.set.Nodes)+len(a.set.Controllers) < len(all[i-1].set.Nodes)+len(all[i-1].set.Controllers) {
			t.Fatalf("attempt %d sent %v after %v", i, render(a.set), render(all[i-1].set))
		}
	}
	if failures != 5 {
		t.Fatalf("%d failed attempts, want the 5 scripted", failures)
	}
	if last := f2.delivered(); !last[len(last)-1].Equal(m2.Plugins()) {
		t.Fatalf("last delivered %v, manager's set %v", render(last[len(last)-1]), render(m2.Plugins()))
	}
}

func TestResendSendsTheSameSetAgain(t *testing.T) {
	srv := servePlugin(t, csifake.New())
	reg := registry.New(newMemStore())
	mustRegister(t, reg, registration(node, "p", "a1", srv.Endpoint, 1))
	m, f := startManager(t, reg, nil, nil)
	first := f.waitDelivered(t, "first", func(s Set) error { return has(s.Nodes, "p", "a1", true) })
	n := len(f.delivered())
	m.Resend()
	waitCount(t, f, n+1)
	if d := f.delivered(); !d[len(d)-1].Equal(first) {
		t.Fatalf("resent %v, want %v", render(d[len(d)-1]), render(first))
	}
}

// A plugin whose probe fails, or says not ready, is reported unhealthy
// with the reason, and healthy again once it answers.
func TestProbeFailureMarksThePluginUnhealthy(t *testing.T) {
	p := csifake.New()
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, func(c *Config) { c.RefreshInterval = 20 * time.Millisecond })
	mustRegister(t, reg, registration(node, "p", "a1", srv.Endpoint, 1))
	f.waitDelivered(t, "healthy", func(s Set) error { return has(s.Nodes, "p", "a1", true) })

	p.Probe.Always(nil, status.Error(codes.FailedPrecondition, "backend unreachable"))
	got := f.waitDelivered(t, "probe fails", func(s Set) error { return has(s.Nodes, "p", "a1", false) })
	if d := got.Nodes["p"].GetHealthDescription(); d != "fingerprint: csi Probe: FailedPrecondition: backend unreachable" {
		t.Errorf("description %q", d)
	}
	// What the last good fingerprint said is still reported.
	if got.Nodes["p"].GetProvider() != csifake.Name || got.Nodes["p"].GetNodeInfo().GetId() != csifake.NodeID {
		t.Errorf("instance lost its fingerprint: %v", got.Nodes["p"])
	}
	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil)
	f.waitDelivered(t, "not ready", func(s Set) error {
		if d := s.Nodes["p"].GetHealthDescription(); d != "probe: plugin is not ready" {
			return fmt.Errorf("description %q", d)
		}
		return nil
	})
	p.Probe.Always(&csipb.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil)
	f.waitDelivered(t, "recovered", func(s Set) error { return has(s.Nodes, "p", "a1", true) })
}

// A plugin registered as a node that serves no node service is reported,
// unhealthy, with why.
func TestMissingServiceIsUnhealthy(t *testing.T) {
	p := csifake.New()
	p.NodeGetCapabilities.Always(nil, status.Error(codes.Unimplemented, "controller only"))
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, nil)
	mustRegister(t, reg, registration(node, "p", "a1", srv.Endpoint, 1))
	f.waitDelivered(t, "no node service", func(s Set) error {
		if err := has(s.Nodes, "p", "a1", false); err != nil {
			return err
		}
		if d := s.Nodes["p"].GetHealthDescription(); d != "plugin does not serve the node service" {
			return fmt.Errorf("description %q", d)
		}
		return nil
	})
}

// A node-only deployment that advertises the controller service but does
// not serve it is fingerprinted all the same.
func TestUnimplementedControllerOfANodePluginIsTolerated(t *testing.T) {
	p := csifake.New()
	p.ControllerGetCapabilities.Always(nil, status.Error(codes.Unimplemented, "node mode"))
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, nil)
	mustRegister(t, reg, registration(node, "p", "a1", srv.Endpoint, 1))
	got := f.waitDelivered(t, "node plugin", func(s Set) error { return has(s.Nodes, "p", "a1", true) })
	if got.Nodes["p"].GetNodeInfo().GetId() != csifake.NodeID {
		t.Errorf("node info %v", got.Nodes["p"].GetNodeInfo())
	}
}

// After a client restart the registry's restored entries are probed again
// before the first set goes out: the first set sent already holds them,
// healthy from the probe though stored unhealthy.
func TestRestoredEntriesAreProbedBeforeTheFirstSend(t *testing.T) {
	p := csifake.New()
	srv := servePlugin(t, p)
	store := newMemStore()
	stale := registration(monolith, "p", "a1", srv.Endpoint, 1)
	stale.Healthy, stale.HealthDescription = false, "checked before the restart"
	mustRegister(t, registry.New(store), stale)
	gone := registration(node, "q", "a2", srv.Endpoint, 2)
	mustRegister(t, registry.New(store), gone)

	reg := registry.New(store)
	if _, err := reg.Restore(func(alloc string) bool { return alloc == "a1" }); err != nil {
		t.Fatal(err)
	}
	release := p.GetPluginInfo.Block()
	_, f := startManager(t, reg, nil, nil)
	testutil.WaitFor(t, waitLimit, func() error {
		if len(f.all()) != 0 {
			return errors.New("a set was sent while a restored plugin was being probed")
		}
		if p.GetPluginInfo.Count() == 0 {
			return errors.New("restored plugin not probed yet")
		}
		return nil
	})
	release()
	f.waitDelivered(t, "restored", func(s Set) error {
		if err := has(s.Controllers, "p", "a1", true); err != nil {
			return err
		}
		return has(s.Nodes, "p", "a1", true)
	})
	if first := f.all()[0].set; first.Nodes["p"] == nil || first.Nodes["q"] != nil {
		t.Fatalf("first set sent %v: want the restored plugin and not the dropped one", render(first))
	}
}

func TestSetEqualAndClone(t *testing.T) {
	a := newSet()
	a.Nodes["p"] = &pb.CSIPluginInfo{PluginId: "p", Healthy: true}
	b := a.Clone()
	if !a.Equal(b) {
		t.Fatal("clone differs")
	}
	b.Nodes["p"].Healthy = false
	if a.Equal(b) || !a.Nodes["p"].GetHealthy() {
		t.Fatal("clone shares instances with the original")
	}
	c := a.Clone()
	maps.Copy(c.Controllers, a.Nodes)
	if a.Equal(c) {
		t.Fatal("a set with a controller more equals one without")
	}
}

// An adapter that is not running when the manager starts (its process is
// still being retried) does not hold back the first set; it is reported
// once it answers.
func TestAdapterNotRunningAtStartDoesNotHoldTheFirstSet(t *testing.T) {
	late := csifake.New()
	release := late.GetPluginInfo.Block()
	ad := newFakeAdapters(t, map[string]*csifake.Plugin{"up": csifake.New(), "late": late})
	ad.states["late"] = AdapterState{Reason: "start failed: no such file"}
	_, f := startManager(t, nil, ad, nil)
	// The blocked GetPluginInfo ends at its own deadline (10s), which
	// would let a manager that waits for it send too: the first set must
	// come well before.
	var first Set
	testutil.WaitFor(t, 5*time.Second, func() error {
		d := f.delivered()
		if len(d) == 0 {
			return errors.New("no set delivered while the late adapter's fingerprint hangs")
		}
		first = d[0]
		return has(first.Nodes, "up", "", true)
	})
	if first.Nodes["late"] != nil || first.Controllers["late"] != nil {
		t.Fatalf("an adapter never fingerprinted was reported: %v", render(first))
	}
	release()
	ad.event("late", AdapterHealthy, "")
	f.waitDelivered(t, "late adapter up", func(s Set) error { return has(s.Nodes, "late", "", true) })
}
