// Package pluginmanager is a client's one CSI plugin manager: it
// fingerprints every CSI plugin on the node, whether a storage adapter of
// the static catalog (csi/adapters) or a task-launched plugin of the dynamic
// registry (csi/registry), and keeps the servers' copy of the node's plugin
// set (CSIPlugins.UpdateNode) up to date.
//
//	m, err := pluginmanager.New(pluginmanager.Config{
//		Registry: reg,                             // *registry.Registry, restored
//		Adapters: adapters,                        // an AdapterSource
//		Send:     client.sendCSIPlugins,           // CSIPlugins.UpdateNode
//	})
//	m.Start()
//	defer m.Stop()
//
// # Instances
//
// Each plugin instance has a worker that connects once (csi.Dial of a
// registry entry's endpoint; csi.New over an adapter's Conn, which follows
// the adapter's restarts) and fingerprints it: GetPluginInfo, Probe,
// plugin, controller and node capabilities, NodeGetInfo (node ID, max
// volumes, topology). It does so at once, then every RefreshInterval (30s)
// while the plugin is healthy, and sooner, backing off from RetryStart,
// while a fingerprint fails or Probe says not ready. Health transitions
// need no polling: the supervisor's checks arrive as registry events, an
// adapter's as its source's events, and a plugin that turns healthy again
// is fingerprinted again at once.
//
// A registry entry is a controller or a node; the two entries of a
// monolith task (one alloc, one socket) are one instance, reported on both
// sides as a monolith. An adapter is reported on the sides its fingerprint
// says it serves (controller service, node service), and not at all before
// its first good fingerprint. A restored registry entry (NeedsProbe) is
// fingerprinted at once and its stored health is not trusted until the
// supervisor checks it again: only the probe counts.
//
// An instance is healthy when its source says so (the registry entry's
// health, the adapter manager's) and its last fingerprint succeeded with
// the plugin ready and serving the side it is reported on; otherwise its
// health_description says which of these failed and why. updated_at is
// when its health last changed.
//
// # The node's set
//
// Per plugin ID and side the set holds one instance: of two allocs of one
// plugin (an update) the one registry.Serving names (the newest healthy).
// A task-launched plugin of a storage adapter's ID replaces the adapter on
// the node, on both sides, healthy or not, while an alloc of it is
// registered; the adapter is reported again when none is. The two are
// different backends (a volume of one is unknown to the other), so the
// node never mixes them nor falls back from one to the other. Until a new
// instance's first fingerprint the set keeps what it reported, and the
// instance that served it keeps answering Controller and Node, so a call
// the servers picked on that report is not refused meanwhile. The set is
// rebuilt after every input (inputs already waiting are applied first, so
// a burst is one set) and offered to the
// sender when it differs from the last one. The sender sends at once, one
// send at a time; a newer set replaces one not yet sent, so an older set
// never follows a newer one, and a failed send is retried with capped
// backoff with the newest set. Resend sends the current set again (the
// client calls it when it registered the node anew).
//
// The first set waits until every plugin known at Start has been
// fingerprinted once (or failed to be), so a restarted client does not
// report its plugins gone while it probes them again; an adapter whose
// process is not running at Start does not hold it back.
package pluginmanager
