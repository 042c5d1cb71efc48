// Package nodes holds the leader's work on nodes' liveness and drains: the
// heartbeat timers that mark a silent node down (and a node that heartbeats
// again ready), the node status changes they propose with the evaluations
// those need, and the drainer that moves allocs off draining nodes in the
// order their CSI plugins require.
//
// The server core builds one of each for its whole life over a Core (the
// local state store and the leader's proposals):
//
//   - Statuses.Set proposes a node's status change with an evaluation of
//     every job it touches; Statuses is also what the heartbeat timers mark
//     nodes with (HeartbeatNodes).
//   - Heartbeater keeps one timer per ready node while the server leads:
//     Start once the leader's barrier passed, Rearm after a snapshot
//     restore, Stop when the leadership ends, Close at shutdown. The node
//     endpoints call Reset on a registration and Heartbeat on a heartbeat,
//     each with TTL(): the configured TTL, or longer once the nodes send
//     more than max_heartbeats_per_second (default 50) heartbeats a second
//     at it (ScaledTTL, as Nomad, scaled for berth's nodes heartbeating
//     about 3.4 times per TTL), so the leader's heartbeat load stops
//     growing with the cluster; a new leader tells nodes, until its timers
//     start, the TTL scaled over the ready nodes in state, and arms them
//     with it plus the grace.
//   - Drainer.Run runs for one leadership; Kick wakes it when a drain is
//     set through the API.
//
// Raft sees only status changes: heartbeats themselves reset timers in
// memory on the leader.
package nodes
