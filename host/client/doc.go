// Package client is the client role of a berth agent: the node that runs
// allocations. It registers the node with the servers (its ID persisted in
// <data_dir>/client/node-id, so a restarted client keeps its identity), with a
// fingerprint of the host and of its task drivers (Config.Drivers, the
// driver manager's DriverInfos in an agent), and heartbeats to keep the node
// ready. When the drivers change (Config.DriversChanged) it registers again,
// so the servers always see each driver's current health.
//
// Heartbeats are cheap by design: the leader resets an in-memory timer and
// writes to raft only when the node's status changes. The client rotates
// through the server list it was configured with, plus the list every
// server returns, so losing any one server (the leader included) only delays
// a heartbeat.
//
// The servers reach the node over a tunnel the client keeps open to one of
// them (rpc/tunnel), following the same server list; on it the client serves
// ClientRPC: a task's logs, read from its rotated files (from the start or
// the end, following as the task writes), and restarts.
//
// # Allocations
//
// With Config.TaskDrivers and Config.State set, the client runs the allocs
// the servers place on it:
//
//   - The watcher calls ClientAllocs.Watch as a blocking query: min_index
//     is the index of the last answer, max_wait WatchMaxWait (5m), and
//     known maps every alloc the client runs to its alloc_modify_index so
//     that unchanged allocs come back as stubs (ID and index only). It
//     asks again as soon as an answer arrives — there is no polling
//     interval — and retries a failed call with a capped backoff (250ms to
//     15s), over the same server failover as heartbeats. A blocking query
//     cannot tell a silent server from one with nothing to say: when
//     another call (a heartbeat, an update) gets no answer from the server
//     the watch waits on, the watch moves to the next server at once. It expects Watch
//     to block until an alloc of the node changes its alloc_modify_index
//     or the node's set of allocs changes, then to send every alloc of the
//     node the servers keep, in full when unknown or changed (with its job
//     version in jobs, keyed "<job id>@<version>"), as a stub otherwise.
//   - Reconciliation: an alloc not running here gets an alloc runner
//     (host/client/allocrunner), unless it is already terminal (stopped,
//     complete, failed or lost); a changed one is given to its runner (a
//     desired stop or evict kills it, each task with its kill_timeout;
//     anything else is an in-place update); a runner whose alloc is no
//     longer sent is destroyed (tasks killed, hooks run, alloc dir removed,
//     state records deleted).
//   - Status: every change of an alloc's status goes to the updater, which
//     sends ClientAllocs.Update at once when no batch is in flight and
//     otherwise coalesces (latest per alloc) into the next batch (the
//     servers batch many nodes' calls into one raft entry). An update
//     reporting an alloc pending is held for the alloc's next status, per
//     alloc, from its first pending update still waiting: 1 s for an
//     alloc none of whose tasks has started, 5 s while the servers are
//     busy as the client sees them (its previous send failed or took
//     over 1 s), 50 ms for a task restarting. A later status ends the
//     hold (running or terminal goes at once; a pending update once a
//     task has started brings it forward to 50 ms), and a held update
//     never rides with another alloc's send before its deadline, so an
//     alloc that starts within the hold reports running alone. A failed
//     batch is retried with backoff, merged under newer updates; a batch
//     the servers refuse is dropped; once the client stops, held updates
//     are not sent. After every registration the status
//     of every alloc is queued again, so what a refused batch or a client
//     restart kept from the servers reaches them.
//   - Restart: the client recovers the allocs in its state DB before it
//     watches: running tasks are recovered through their drivers (the same
//     processes), dead ones are not run again, and the first Watch answer
//     reconciles them with the servers' view (allocs stopped meanwhile are
//     stopped, allocs the servers forgot are destroyed). Task handles no
//     alloc claims are destroyed.
//   - RestartAlloc restarts tasks in place (alloc restart); LogFiles finds
//     a task's log files (alloc logs).
//   - Driver events: when Config.TaskDrivers is a DriverEventSource
//     (ManagerDrivers is), the client holds one TaskEvents subscription per
//     driver from its start to its shutdown, following plugin restarts
//     (taskdrivers.Driver.TaskEvents) and subscribing again with backoff
//     after a stream error; it ends when the driver fails for good. The
//     stream is read into a bounded backlog (1024 events, the oldest
//     dropped and counted), so routing never holds it up. Each event
//     goes, by its task ID ("<alloc>.<task>.<random>", so by the
//     alloc's runner, then the task whose newest or previous attempt has
//     the ID), to
//     the task runner, which records it as a "Driver" event without ever
//     blocking the stream (taskrunner.DriverEvent: a bounded queue, the
//     oldest dropped and counted, same-kind events coalesced, one
//     recording per 250ms); an event of a task the client does not run is
//     dropped with a debug log. The events reach the servers with the
//     alloc's next status update.
//
// Hooks (Config.Hooks) are added to every alloc runner; see packages
// allocrunner and taskrunner for their contract.
//
// # CSI plugins
//
// With Config.CSIRegistry (the dynamic registry on the state DB) or
// Config.CSIAdapters (the storage adapters) the client runs the CSI plugin
// manager (csi/pluginmanager), which sends the node's plugin set with
// CSIPlugins.UpdateNode as soon as it changes. The start order is: build
// the alloc runners from the state DB without running them, restore the
// registry (an entry whose alloc no runner has, or whose alloc is
// terminal, is dropped), run the runners, start the plugin manager. After
// a registration that follows a NotFound heartbeat the set is sent again.
//
// # Host volumes
//
// The node's registration carries its host volumes (Node.host_volumes):
// Config.HostVolumes, the static ones of the agent's config, and the
// dynamic ones its hostvolumes.Manager made at the servers' request
// (ClientCSI HostVolumeCreate and HostVolumeDelete over the tunnel),
// recorded in <data_dir>/client/host_volumes.json and made again at start
// before the first registration; a change re-registers the node. Tasks get
// them through volumehooks.HostVolumeTaskHook (host_volumes.go).
// # Node secret
//
// The client makes its node secret (256 random bits) at its first start and
// stores it (Config.Identity, else the state DB of Config.State) before any
// call; every call it makes to the servers, the tunnel included, carries it
// in gRPC metadata (rpc.NodeSecretHeader). Once every server knows node
// identities, the registration that finds the node without a secret adopts
// the one it presents (a retry after a lost answer presents the same one).
// A heartbeat answered register_again (the node has none yet) makes it
// register again. A client that lost its state DB is refused with the
// `berth node readmit` command that lets it register again (node_identity.go).
package client
