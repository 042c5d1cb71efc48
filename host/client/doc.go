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
package client
