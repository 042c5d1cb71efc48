package acceptance

import (
	"fmt"
	"testing"
	"time"
)

// A plugin ID served by two kinds of instance. A dev
// agent serves "hostpath" through its built-in storage adapter, whose
// controller publishes; a system job runs the hostpath plugin as a task
// with the same ID and without publish (kubernetes-csi hostpath's
// default). The task plugin replaces the adapter on the node, and the
// plugin's facts follow it: controller_required false, so a volume it
// creates is claimed, staged and published with no ControllerPublish (no
// attachment) and freed on release. When the job stops, the adapter
// serves the ID again and the publish is required again.
func TestPluginIDSwitchesFromAdapterToTaskPlugin(t *testing.T) {
	a := startDevAgent(t)
	t.Cleanup(func() { stopAllJobs(t, a, "hp-same-id") })
	waitPluginSchedulable(t, a, "hostpath", 1, 1)
	servedBy := func(alloc bool, required bool) func() error {
		return func() error {
			p, err := a.plugin("hostpath")
			if err != nil {
				return err
			}
			c, n := p.Controllers[p.nodeID()], p.Nodes[p.nodeID()]
			if (c.AllocID != "") != alloc || (n.AllocID != "") != alloc || !c.Healthy || !n.Healthy {
				return fmt.Errorf("controller %+v node %+v, want both healthy and from a task alloc: %v", c, n, alloc)
			}
			if c.AllocID != n.AllocID {
				return fmt.Errorf("the node mixes instances: controller of alloc %q, node of alloc %q", c.AllocID, n.AllocID)
			}
			if p.ControllerRequired != required || !p.Schedulable {
				return fmt.Errorf("controller_required %v schedulable %v, want %v and true", p.ControllerRequired, p.Schedulable, required)
			}
			return nil
		}
	}
	eventually(t, 10*time.Second, "hostpath served by the adapter", servedBy(false, true))

	runJob(t, a, "hp-same-id", csiJob("hp-same-id", "system", 0, hostpathTask("hostpath", "monolith", "monolith", t.TempDir(), "--no-publish")))
	eventually(t, 60*time.Second, "hostpath served by the task plugin, no publish required", servedBy(true, false))

	createVolume(t, a, "sw1", "hostpath")
	claimID, _ := operatorClaim(t, a, "sw1", "write")
	v, err := a.volume("sw1")
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Attachments) != 0 {
		t.Fatalf("a claim of a plugin that does not publish has attachments %+v", v.Attachments)
	}
	if out, err := a.cli("volume", "release", claimID); err != nil {
		t.Fatalf("volume release %s: %v\n%s", claimID, err, out)
	}
	waitVolumeFreed(t, a, "sw1", time.Now(), freeBound)

	stopJob(t, a, "hp-same-id")
	eventually(t, 60*time.Second, "hostpath served by the adapter again", servedBy(false, true))
}

// nodeID is the one node that reports the plugin (a dev agent's).
func (p apiPlugin) nodeID() string {
	for id := range p.Controllers {
		return id
	}
	for id := range p.Nodes {
		return id
	}
	return ""
}
