package pluginmanager

import (
	"path/filepath"
	"testing"

	"berth.dev/berth/csi/csifake"
	"berth.dev/berth/csi/registry"
)

// After a client restart, two allocs of one plugin (an update in
// progress) are restored with NeedsProbe and the health they had. The
// older one's task is recovered and its supervisor registers it healthy
// again; the newer one's task died while the client was down (nothing
// serves its socket). The node must report the live, healthy older one,
// not the newer entry on the strength of its pre-restart health.
func TestRestoredStaleHealthyEntryDoesNotServe(t *testing.T) {
	live := servePlugin(t, csifake.New())
	deadEndpoint := "unix://" + filepath.Join(shortDir(t), "csi.sock") // nothing listens
	store := newMemStore()
	mustRegister(t, registry.New(store), registration(node, "p", "old", live.Endpoint, 10))
	mustRegister(t, registry.New(store), registration(node, "p", "new", deadEndpoint, 20))
	reg := registry.New(store)
	if _, err := reg.Restore(func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	_, f := startManager(t, reg, nil, nil)
	// The recovered old task's supervisor finds its plugin and registers it.
	mustRegister(t, reg, registration(node, "p", "old", live.Endpoint, 10))
	f.waitDelivered(t, "the live healthy instance serves", func(s Set) error { return has(s.Nodes, "p", "old", true) })
}
