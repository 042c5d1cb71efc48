package pluginmanager

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/rpc/pb"
)

// A task plugin whose first fingerprint failed (Probe answered Unavailable
// while it started) is reported as a controller without controller_info:
// the servers read that as "not known yet", not as a controller that
// stopped publishing (fsm testdata/controller_unfingerprinted.txt).
func TestControllerNotFingerprintedReportsNoControllerInfo(t *testing.T) {
	reg := &pb.CSIPluginRegistration{PluginId: "ebs", AllocId: "a1", Healthy: true, Provider: "ebs.csi.aws.com"}
	in := &instance{pluginID: "ebs", source: pb.CSIPluginSource_CSI_PLUGIN_SOURCE_TASK, allocID: "a1",
		entries: map[pb.CSIPluginType]registry.Entry{
			pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER: {Registration: reg},
			pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE:       {Registration: reg},
		},
		attempted: true, fpErr: status.Error(codes.Unavailable, "starting"),
		health: map[pb.CSIPluginType]healthMark{},
	}
	c := in.info(pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER, time.Unix(10, 0))
	if c.GetHealthy() || c.GetControllerInfo() != nil || c.GetControllerRequired() || c.GetProvider() != "ebs.csi.aws.com" {
		t.Errorf("before a good fingerprint: healthy=%v controller_info=%v required=%v provider=%q, want an unhealthy instance with no controller_info, named by its registration",
			c.GetHealthy(), c.GetControllerInfo(), c.GetControllerRequired(), c.GetProvider())
	}
}

// A driver deployed in node mode that advertises the controller service
// but answers ControllerGetCapabilities Unimplemented serves no controller:
// run as a monolith, its controller side is unhealthy and reports no
// controller_info, so it has no word on whether the plugin publishes.
func TestUnimplementedControllerCapabilitiesServeNoController(t *testing.T) {
	p := csifake.New()
	p.ControllerGetCapabilities.Always(nil, status.Error(codes.Unimplemented, "node mode"))
	srv := servePlugin(t, p)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, nil)
	mustRegister(t, reg, registration(monolith, "p", "a1", srv.Endpoint, 1))
	got := f.waitDelivered(t, "node side healthy", func(s Set) error { return has(s.Nodes, "p", "a1", true) })
	c := got.Controllers["p"]
	if c == nil {
		t.Fatal("the controller side of the monolith is not reported")
	}
	if c.GetHealthy() || c.GetControllerInfo() != nil || c.GetRequiresControllerPlugin() {
		t.Errorf("controller side: healthy=%v controller_info=%v requires_controller_plugin=%v, want unhealthy with no controller_info",
			c.GetHealthy(), c.GetControllerInfo(), c.GetRequiresControllerPlugin())
	}
	if d := c.GetHealthDescription(); d != "plugin does not serve the controller service" {
		t.Errorf("controller side: description %q", fmt.Sprint(d))
	}
}
