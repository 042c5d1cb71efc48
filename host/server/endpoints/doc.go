// Package endpoints holds the server's RPC endpoints over the replicated
// state: jobs, evaluations, allocs, nodes and node operations, the clients'
// alloc and claim calls, CSI plugins, volumes and claims.
//
// Every endpoint reads the local state store (Reader: a plain, blocking or
// consistent read, and the metadata of its answer) and proposes commands
// (Proposer); a follower forwards writes and leader-only reads to the
// leader before they reach an endpoint, so an endpoint never asks which
// server leads. Beyond those, an endpoint asks the server for a few things
// through small interfaces declared here: the table rule's version check
// and raft's server list (Cluster), the heartbeat timers (Heartbeats), the
// drainer (Drainer), the garbage collector (GarbageCollector) and the CSI
// controller calls (volumeloops.ControllerCaller).
//
// The server core builds the endpoints once with New, from Deps (those
// parts and its settings) and Hooks (tests only), and registers them on
// its gRPC server with Set.Register. The operator and status services,
// which are about raft and the servers themselves, stay in the core.
//
// Lists are paged the same way everywhere (PerPage, PageOf, RefuseBlocking):
// no answer grows with the cluster.
package endpoints
