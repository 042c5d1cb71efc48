package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/errcode"
)

// Controller hands out the controller instance the node reports: the
// serving task plugin, refusing it while unhealthy with the reason, and
// NotFound for a plugin the node has no controller of. A call made through
// it reaches that instance's plugin.
func TestControllerIsTheReportedHealthyInstance(t *testing.T) {
	p := csifake.New()
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	m, f := startManager(t, reg, nil, nil)

	if _, err := m.Controller("p"); !errors.Is(err, ErrNoController) || errcode.Code(err) != codes.NotFound {
		t.Fatalf("before registration: %v (code %s), want ErrNoController NotFound", err, errcode.Code(err))
	}
	mustRegister(t, reg, registration(controller, "p", "a1", srv.Endpoint, 10))
	f.waitDelivered(t, "controller", func(s Set) error { return has(s.Controllers, "p", "a1", true) })
	cl, err := m.Controller("p")
	if err != nil {
		t.Fatal(err)
	}
	p.CreateVolume.Next(&csipb.CreateVolumeResponse{Volume: &csipb.Volume{VolumeId: "ext-1"}}, nil)
	resp := &csipb.CreateVolumeResponse{}
	if err := cl.Invoke(context.Background(), csipb.Controller_CreateVolume_FullMethodName, &csipb.CreateVolumeRequest{Name: "v"}, resp); err != nil {
		t.Fatal(err)
	}
	if resp.GetVolume().GetVolumeId() != "ext-1" || p.CreateVolume.Count() != 1 {
		t.Fatalf("forwarded create: %v, %d calls", resp, p.CreateVolume.Count())
	}
	if _, err := m.Controller("other"); !errors.Is(err, ErrNoController) {
		t.Fatalf("another plugin: %v", err)
	}

	if err := reg.SetHealth("a1", "p", false, "probe: not ready"); err != nil {
		t.Fatal(err)
	}
	f.waitDelivered(t, "unhealthy", func(s Set) error { return has(s.Controllers, "p", "a1", false) })
	_, err = m.Controller("p")
	if !errors.Is(err, ErrControllerUnhealthy) || errcode.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unhealthy: %v (code %s), want ErrControllerUnhealthy", err, errcode.Code(err))
	}
	if want := `csi plugin "p": ` + ErrControllerUnhealthy.Error() + ": probe: not ready"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if err := reg.Deregister("a1", "p"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, waitLimit, func() error {
		if _, err := m.Controller("p"); !errors.Is(err, ErrNoController) {
			return fmt.Errorf("after deregistration: %v", err)
		}
		return nil
	})
}

// An adapter serving the controller side is the node's controller too; a
// node-only adapter is not, and Invoke refuses a method off the allow-list
// with PermissionDenied before the plugin sees it.
func TestControllerOfAnAdapter(t *testing.T) {
	nodeOnly := csifake.New()
	nodeOnly.GetPluginCapabilities.Always(&csipb.GetPluginCapabilitiesResponse{}, nil)
	hp := csifake.New()
	ad := newFakeAdapters(t, map[string]*csifake.Plugin{"hostpath": hp, "nodeonly": nodeOnly})
	m, f := startManager(t, nil, ad, nil)
	f.waitDelivered(t, "adapters", func(s Set) error { return has(s.Controllers, "hostpath", "", true) })
	cl, err := m.Controller("hostpath")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Controller("nodeonly"); !errors.Is(err, ErrNoController) {
		t.Errorf("node-only adapter: %v, want ErrNoController", err)
	}
	err = cl.Invoke(context.Background(), csipb.Node_NodeStageVolume_FullMethodName, &csipb.NodeStageVolumeRequest{}, &csipb.NodeStageVolumeResponse{})
	if status.Code(err) != codes.PermissionDenied && errcode.Code(err) != codes.PermissionDenied {
		t.Errorf("a node call through Invoke: %v, want PermissionDenied", err)
	}
	if hp.NodeStageVolume.Count() != 0 {
		t.Errorf("the plugin saw %d node stage calls", hp.NodeStageVolume.Count())
	}
	ad.event("hostpath", AdapterExited, "exit status 1")
	f.waitDelivered(t, "exited", func(s Set) error { return has(s.Controllers, "hostpath", "", false) })
	if _, err := m.Controller("hostpath"); !errors.Is(err, ErrControllerUnhealthy) {
		t.Errorf("exited adapter: %v, want ErrControllerUnhealthy", err)
	}
}
