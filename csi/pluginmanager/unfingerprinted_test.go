package pluginmanager

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
)

// A task plugin whose first fingerprint fails (Probe answers Unavailable
// while it starts) is reported as a controller without controller_info:
// the servers read that as "not known yet", not as a controller that
// stopped publishing. Once fingerprinted it reports what it can do.
func TestControllerNotFingerprintedReportsNoControllerInfo(t *testing.T) {
	task := csifake.New()
	task.Probe.Next(nil, status.Error(codes.Unavailable, "starting"))
	srv := servePlugin(t, task)
	reg := registry.New(newMemStore())
	_, f := startManager(t, reg, nil, func(c *Config) { c.RetryStart = time.Hour })
	mustRegister(t, reg, registration(monolith, "ebs", "a1", srv.Endpoint, 10))
	f.waitDelivered(t, "task plugin healthy", func(s Set) error { return has(s.Controllers, "ebs", "a1", true) })
	sets := f.delivered()
	first := sets[0].Controllers["ebs"]
	if first.GetHealthy() || first.GetControllerInfo() != nil || first.GetControllerRequired() {
		t.Errorf("before a good fingerprint: healthy=%v controller_info=%v required=%v, want an unhealthy instance with no controller_info",
			first.GetHealthy(), first.GetControllerInfo(), first.GetControllerRequired())
	}
	last := sets[len(sets)-1].Controllers["ebs"]
	if !last.GetControllerInfo().GetSupportsAttachDetach() || !last.GetControllerRequired() {
		t.Errorf("fingerprinted: controller_info=%v required=%v, want a controller that publishes", last.GetControllerInfo(), last.GetControllerRequired())
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
