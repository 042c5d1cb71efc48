// Package volumehooks holds the client's CSI hooks for the alloc and task
// runners: the csi_plugin supervisor, the task hook that turns a task with
// a csi_plugin block into a plugin in the node's dynamic registry
// (csi/registry), from which the plugin manager fingerprints it and tells
// the servers; and the volume hooks (VolumeHooks), which bring a group's
// CSI volumes to its tasks and take them down again.
//
// # Volume hooks
//
// The client builds one VolumeHooks (with the Claims service over its
// server failover, the node volume manager csi/volumemanager, the plugin
// manager and a Reporter) and adds AllocHook to Hooks.Alloc and TaskHook to
// Hooks.Task.
//
// Prerun, for each CSI volume of the group in name order: ClientClaim with
// min_index (a blocking query: a reserved claim wakes the call when it
// becomes ready, no polling; servers that do not answer are retried with
// backoff, a refusal fails the alloc); the node plugin waited for in the
// plugin manager, at most PluginWait (ErrNodePluginUnavailable naming
// volume, plugin, alloc and node); Volumes.Publish (stage once per node,
// publish once per alloc, usage persisted); "Volume staged" and "Volume
// published" events, each stamped when its call returned; a node
// expansion the volume has pending (Volume.node_expansion_pending_bytes)
// made with Volumes.Expand ("Volume expanded", the size carried by the
// in-use report; a node plugin without EXPAND_VOLUME leaves it pending);
// the in-use report queued. A recovered alloc whose volume the state DB
// says is published goes on without asking anyone; its in-use report is
// queued again, for a client that died before queueing it. A failure is shown on
// the claim (a failed try with its class and code) and as a task event.
//
// The task hook gives a task its volume_mounts: an isolating driver a
// bind mount of the publish path at the destination (read-only when the
// mount or the request says so), BERTH_VOLUME_<NAME> and ${volume.<name>}
// the destination; raw_exec the host publish path in both. A read-only
// volume_mount under raw_exec is read-only too: an alloc whose every
// mount of a volume is read-only publishes it read-only; one that also
// mounts it writable (another task) gives the read-only task a read-only
// bind mount of the publish target in its task dir
// (<task dir>/csi-volumes/<volume>, made as root at prestart, removed
// after every exit, at destroy and by the alloc's teardown before it
// unpublishes), or fails its prestart with ErrReadOnlyMount.
//
// Postrun (and Destroy) tear down: Volumes.Unpublish (unstaging when the
// alloc was the last user; "Volume unpublished" and "Volume unstaged"
// events), then the node-detached report. A teardown runs
// in the background for as long as the client does: each try is bounded
// by TeardownAttempt (uncertain errors retried by the manager within it),
// and a try that fails (a final error, or a node plugin gone) is shown on
// the claim and as a task event and tried again with backoff; Postrun
// waits for it at most TeardownWait. Reports go through
// the Reporter: persisted when queued (one per claim, the newest), sent at
// once and retried with capped backoff, so a teardown never waits for a
// reachable server and a restart loses none; one that cannot be persisted
// (a full disk) is sent all the same and persisted again before each try.
// A report is sent while its record is written, so after a crash a client
// may send an older report of a claim after a newer one was delivered;
// the servers refuse it because claims never move back (see Reporter).
// Sweep, after a client
// restart, tears down the uses of allocs no runner holds and unstages
// volumes left without users.
//
// Detach (`berth volume detach`, the client's ClientCSI.NodeDetachVolume)
// takes a volume off the node through the same teardowns, for the users
// the servers checked (their claims releasing) and for them only: each
// listed user's use — or its publish under way — is torn down, a teardown
// already under way joined and its next try run at once rather than after
// its backoff (every use kicked before any is waited for), the volume
// unstaged when no use is left; it waits for them within the call's
// deadline and answers per user: done, not held here, or failed with the
// next try's error. It is refused (ErrDetachInUse) while a listed alloc
// is live here — its runner has not reached Postrun, so a stopped alloc
// whose tasks are still being killed is live — and (ErrDetachPluginGone)
// when the node plugin is not running.
//
// The client adds the csi_plugin supervisor to every task runner's hooks:
//
//	hooks.Task = append(hooks.Task, volumehooks.NewCSIPluginSupervisor(volumehooks.SupervisorConfig{
//		DataDir: dataDir, Registry: reg, Logger: logger,
//	}))
//
// RunOperatorClaims does what the volume hook does, for the claims an operator makes from
// the CLI (`berth volume claim`): it follows the node's claims with a
// blocking query and publishes, reports and tears them down through the
// same publish and teardown bookkeeping as the alloc hooks, keyed by claim
// instead of alloc. It is not a runner hook, but it lives here because it
// shares that bookkeeping (a use has one publish or one teardown under
// way at a time, whoever asked for it) and the claim reports. While the
// node holds no operator claim it says so (holds_none), and the servers
// hold back the empty lists other nodes' claim changes would wake it with.
//
// # Layout on the host
//
//	<data_dir>/csi/plugins/<alloc>-<task>/csi.sock   the plugin's socket (PluginDir, PluginSocket)
//	<data_dir>/csi/volumes/<plugin>/                 the plugin's staging and publish base (StagePublishDir)
//
// The staging/publish base is keyed by plugin ID, not alloc, so a newer
// alloc of a plugin (an update) finds what the older one staged, and the
// volume hook finds it from the plugin ID alone. Targets given to the
// plugin in NodeStage/NodePublish calls must lie under it, as the plugin
// sees it: the registry entry's stage_publish_dir.
//
// # Prestart
//
// The hook creates both directories and, unless the task was recovered
// after a client restart, removes a socket the previous attempt left. It
// asks the task's driver whether it honours mounts
// (runhooks.TaskInfo.Driver):
//
//   - An isolating driver (exec) gets two mounts, both with bidirectional
//     propagation: the plugin dir at csi_plugin.mount_dir and the staging
//     base at stage_publish_base_dir (the plugin mounts volumes under it,
//     and the host must see them). CSI_ENDPOINT is
//     unix://<mount_dir>/csi.sock; ${csi.mount_dir} and
//     ${csi.stage_publish_base_dir} are the task paths.
//   - An unisolated driver (raw_exec) gets host paths: CSI_ENDPOINT is the
//     host socket, and ${csi.mount_dir} and ${csi.stage_publish_base_dir}
//     are the host directories.
//
// ${CSI_ENDPOINT} and ${csi.*} work in the task's config (args included)
// either way, as every env var and hook variable does (package taskenv).
// A socket path longer than a unix socket address holds (MaxSocketPath,
// 107 bytes) — on the host, from a long data_dir, or in an isolated task,
// from a long mount_dir — fails the prestart with ErrSocketPathTooLong
// naming the path, its length, the limit and the longest data_dir (or
// mount_dir) that fits: the plugin could not listen there, and the
// registry's endpoint could not be dialled. There is no workaround to
// take, since the plugin itself binds the path; a shorter data_dir fixes
// it. The error is runhooks.Unrecoverable, as are the refusals of an
// invalid block (ErrInvalidPluginBlock) and of an unconfigured client
// (ErrNotConfigured): the task fails at once, with no restart, and the
// client logs it, rather than failing again after every restart delay.
//
// # Supervision
//
// After every start (and after a recovery) a supervisor goroutine probes
// the plugin at the start cadence until Probe says ready. While the socket
// does not exist it is looked for (a stat, not a dial) every
// StartProbeInterval (25ms), so a plugin is probed as soon as it listens;
// a plugin that answers not ready, or fails the call, is probed after
// StartProbeInterval, doubling up to MaxStartProbeInterval (1s). A failed
// call drops the connection, so a plugin that comes back is seen at the
// next probe rather than after gRPC's reconnect backoff. It then calls GetPluginInfo and registers the plugin,
// healthy, with its type, ID, alloc, the alloc's create index, the host
// endpoint, provider name and version and stage_publish_dir: a "Plugin
// became healthy" event. Every call has a deadline (CallTimeout, and while
// starting never past the health deadline), and stopping the supervisor
// cancels the call in flight, so a plugin that hangs neither hangs a hook
// nor delays a restart by more than CallTimeout.
//
// A plugin not healthy within csi_plugin.health_timeout gets a "Plugin
// health timeout" event (with the last reason) and its attempt is
// restarted through TaskInfo.Lifecycle as a failure: the group's restart
// policy counts it like a crash (delay, attempts per interval, mode), and
// past its attempts the task fails.
//
// Once registered, the plugin is probed every HealthInterval (30s). Each
// change healthy ↔ unhealthy is one task event ("Plugin became
// unhealthy" with the reason, "Plugin became healthy") and a
// registry.SetHealth; a registry write that fails is tried again at the
// next probe. An unhealthy plugin keeps its entry, marked unhealthy: the
// plugin manager serves nothing through it and the servers show why (as
// Nomad keeps it in its dynamic registry). A plugin unhealthy at every
// probe for its health_timeout (from the first probe that found it so;
// while unhealthy it is probed again at the latest when that runs out)
// gets a "Plugin health timeout" event naming it and how long it was
// unhealthy, and its attempt is restarted as a failure, like one never
// healthy; the restart's Stop keeps its entries, unhealthy, until the next
// attempt registers it again. A probe then gets its full
// CallTimeout, so a plugin that hangs while unhealthy is restarted at most
// CallTimeout after its health_timeout. A task whose runner gave no
// Lifecycle cannot be restarted: the event is emitted once and the plugin
// is still probed (a starting one with no health deadline, registered
// when ready), so one that recovers is healthy again.
//
// SupervisorConfig.Clock times every wait and every deadline the
// supervisor sets, so tests drive them by hand; the CSI client also
// bounds each call by CallTimeout on the wall clock (its own deadline,
// csi.WithTimeouts), a backstop a manual clock does not move.
//
// # Teardown
//
// Every teardown hook stops the supervisor and waits for it. Stop before
// a restart and Exited (after every exit, before the restart policy
// decides) keep the alloc's entries of the plugin, marked unhealthy with
// why: while the alloc lives the plugin ID is the task plugin's on the
// node, and a storage adapter of the same ID (another backend) must not
// be reported in its place between two attempts. Stop before a kill,
// Finished (the task dead for good: killed, or ended by its restart
// policy) and Destroy deregister them, so the plugin manager and the
// servers see the plugin gone rather than unhealthy forever.
// Deregistering twice is harmless. A client restart runs no teardown: the
// registry keeps the entries (restored with NeedsProbe), and the recovered
// task's supervisor probes the plugin and registers it again.
//
// # Host volumes
//
// HostVolumeTaskHook gives a task the host volumes its volume_mounts name
// (group volumes of type "host": a static host_volume of the client's
// config or a dynamic one the client made): there is nothing to stage or
// publish, and a dynamic volume's claim is ready when the alloc is placed,
// so the hook only looks the directory up in the node's host volumes and
// hands it on — a bind mount under an isolating driver (read-only when the
// mount, the request or the host volume is; with the mount's
// propagation_mode, which CSI mounts honour too), the host path in
// ${volume.<name>} and BERTH_VOLUME_<NAME> under an unisolated one.
//
// The package lives under host/client, not at the module root as the
// design's layout has it, because a task hook implements
// host/client/taskrunner's interfaces, and packages outside host/ may not
// import host/ (the import rules of make check).
package volumehooks
