package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/csi"
	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// A task-launched plugin of a storage adapter's ID replaces the adapter on
// the node, on both sides, for as long as its alloc is registered: reported
// unhealthy when it is (never the adapter in its place, a different
// backend), and the adapter is reported again once the alloc is gone. The
// set says what the task plugin says of itself: it does not publish.
func TestTaskPluginReplacesAdapterOfTheSameID(t *testing.T) {
	ad := newFakeAdapters(t, map[string]*csifake.Plugin{"hostpath": csifake.New()})
	task := csifake.New()
	task.ControllerGetCapabilities.Always(csifake.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), nil)
	srv := servePlugin(t, task)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, ad, nil)
	got := f.waitDelivered(t, "adapter", func(s Set) error { return has(s.Controllers, "hostpath", "", true) })
	if !got.Controllers["hostpath"].GetControllerRequired() {
		t.Fatalf("the adapter publishes, yet its controller is reported not requiring it: %v", got.Controllers["hostpath"])
	}

	mustRegister(t, reg, registration(monolith, "hostpath", "a1", srv.Endpoint, 10))
	got = f.waitDelivered(t, "task plugin", func(s Set) error {
		if err := has(s.Controllers, "hostpath", "a1", true); err != nil {
			return err
		}
		return has(s.Nodes, "hostpath", "a1", true)
	})
	if c := got.Controllers["hostpath"]; c.GetControllerRequired() || c.GetSource() != taskSource {
		t.Errorf("task plugin's controller: required %v source %s, want not required, task", c.GetControllerRequired(), c.GetSource())
	}

	if err := reg.SetHealth("a1", "hostpath", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "task plugin unhealthy", func(s Set) error {
		if err := has(s.Controllers, "hostpath", "a1", false); err != nil {
			return err
		}
		return has(s.Nodes, "hostpath", "a1", false)
	})
	// The task restarts: its supervisor keeps the entry, unhealthy, until
	// the next attempt registers it again.
	mustRegister(t, reg, registration(monolith, "hostpath", "a1", srv.Endpoint, 10))
	f.waitDelivered(t, "task plugin healthy again", func(s Set) error { return has(s.Controllers, "hostpath", "a1", true) })
	// Never a mix: every set names one source on both sides; and from the
	// task plugin's first set on, across its restart, never the adapter.
	seenTask := false
	for _, s := range f.delivered() {
		c, n := s.Controllers["hostpath"], s.Nodes["hostpath"]
		if c != nil && n != nil && c.GetAllocId() != n.GetAllocId() {
			t.Fatalf("a set mixes the adapter and the task plugin: %v", render(s))
		}
		seenTask = seenTask || c.GetAllocId() == "a1"
		if seenTask && (c.GetAllocId() != "a1" || n.GetAllocId() != "a1") {
			t.Fatalf("the adapter reported while the task plugin's alloc is registered: %v", render(s))
		}
	}

	if err := reg.Deregister("a1", "hostpath"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "adapter again", func(s Set) error {
		if err := has(s.Controllers, "hostpath", "", true); err != nil {
			return err
		}
		return has(s.Nodes, "hostpath", "", true)
	})
}

// While a task plugin that replaces an adapter is fingerprinted for the
// first time, the node still reports the adapter, and the servers' calls,
// picked on that report, still reach it: Controller never answers "no
// controller here" (which the client turns into Unavailable, the 503 a
// volume create got while the plugin ID switched instances).
func TestControllerServesThroughTheSwitch(t *testing.T) {
	hp := csifake.New()
	ad := newFakeAdapters(t, map[string]*csifake.Plugin{"hostpath": hp})
	task := csifake.New()
	release := task.GetPluginInfo.Block()
	defer release()
	srv := servePlugin(t, task)
	reg := registry.New(newMemStore())
	m, f := startManager(t, reg, ad, nil)
	f.waitDelivered(t, "adapter", func(s Set) error { return has(s.Controllers, "hostpath", "", true) })

	m.mu.Lock()
	changed := m.changed
	m.mu.Unlock()
	mustRegister(t, reg, registration(monolith, "hostpath", "a1", srv.Endpoint, 10))
	testutil.WaitFor(t, waitLimit, func() error {
		select {
		case <-changed:
		default:
			return fmt.Errorf("the set was not built since the registration")
		}
		if task.GetPluginInfo.Count() == 0 {
			return fmt.Errorf("the task plugin's fingerprint has not started")
		}
		return nil
	})
	cl, err := m.Controller("hostpath")
	if err != nil {
		t.Fatalf("while the task plugin is fingerprinted: %v", err)
	}
	hp.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-1"}}, nil)
	resp := &csipb.CreateVolumeResponse{}
	if err := cl.Invoke(context.Background(), csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "v"}, resp); err != nil {
		t.Fatal(err)
	}
	if hp.CreateVolume.Count() != 1 || task.CreateVolume.Count() != 0 {
		t.Fatalf("create reached the adapter %d times and the task plugin %d times, want the adapter once", hp.CreateVolume.Count(), task.CreateVolume.Count())
	}
	if err := has(f.delivered()[len(f.delivered())-1].Controllers, "hostpath", "", true); err != nil {
		t.Fatalf("reported meanwhile: %v", err)
	}

	release()
	f.waitDelivered(t, "task plugin", func(s Set) error { return has(s.Controllers, "hostpath", "a1", true) })
	if _, err := m.Controller("hostpath"); err != nil {
		t.Fatalf("after the switch: %v", err)
	}
}

// A call addressed to the adapter instance (the servers' state before the
// node's report of the switch is applied) is refused once a task plugin
// of its ID serves in its place, with csi.ErrControllerInstanceChanged
// naming both; addressed to the task plugin, or to no instance, it is
// served by the task plugin.
func TestControllerOfRefusesACallForTheReplacedAdapter(t *testing.T) {
	hp := csifake.New()
	ad := newFakeAdapters(t, map[string]*csifake.Plugin{"hostpath": hp})
	task := csifake.New()
	task.ControllerGetCapabilities.Always(csifake.ControllerCapabilities(csipb.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME), nil)
	srv := servePlugin(t, task)
	reg := registry.New(newMemStore())
	m, f := startManager(t, reg, ad, nil)
	got := f.waitDelivered(t, "adapter", func(s Set) error { return has(s.Controllers, "hostpath", "", true) })
	adapter := csi.InstanceOf(got.Controllers["hostpath"])
	if _, err := m.ControllerOf("hostpath", adapter); err != nil {
		t.Fatalf("a call for the adapter while it serves: %v", err)
	}

	mustRegister(t, reg, registration(monolith, "hostpath", "a1", srv.Endpoint, 10))
	got = f.waitDelivered(t, "task plugin", func(s Set) error { return has(s.Controllers, "hostpath", "a1", true) })
	_, err := m.ControllerOf("hostpath", adapter)
	if !errors.Is(err, csi.ErrControllerInstanceChanged) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a call for the adapter after the task plugin replaced it: %v (code %s), want ErrControllerInstanceChanged", err, errcode.Code(err))
	}
	for _, want := range []string{`"hostpath"`, "storage adapter", "task plugin of alloc a1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	for _, expect := range []*pb.CSIControllerInstance{csi.InstanceOf(got.Controllers["hostpath"]), nil} {
		cl, err := m.ControllerOf("hostpath", expect)
		if err != nil {
			t.Fatalf("a call for %v: %v", expect, err)
		}
		task.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext"}}, nil)
		if err := cl.Invoke(context.Background(), csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "v"}, &csipb.CreateVolumeResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	if hp.CreateVolume.Count() != 0 || task.CreateVolume.Count() != 2 {
		t.Errorf("CreateVolume on the adapter %d, on the task plugin %d, want 0 and 2", hp.CreateVolume.Count(), task.CreateVolume.Count())
	}
}
