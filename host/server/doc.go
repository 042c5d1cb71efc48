// Package server is the server role's core: one raft voter (raft setup,
// its log and snapshot stores, the typed proposal wrapper raftApply,
// snapshot save and restore), how servers find each other and form a
// cluster (discovery), how a follower forwards a request to the leader
// (forward.go), and the leadership itself: once raft elects this server,
// it waits for its barrier, then runs the leader's duties until the
// leadership ends or a snapshot restore replaces the state (leader.go).
//
// New builds the parts the core composes and hands each what it needs of
// the core through a small interface the part declares (core.go adapts
// the Server to them):
//
//   - evals: the evaluation broker, the scheduler workers and the feed
//     that wakes blocked evaluations (leader duties);
//   - nodes: heartbeat timers, node status changes and the drainer;
//   - volumeloops: the volume leader loops (attach, reaper, reconcile) and
//     the controller picker;
//   - clientproxy: the server→client calls over the nodes' tunnels,
//     including the CSI controller calls the volume loops make;
//   - endpoints: the RPC endpoints of the replicated state. The operator
//     and status services, which are about raft and the servers, stay
//     here.
//
// No part imports this package. Config is what an agent sets; the hooks
// and bounds only this package's tests change are options of newServer,
// and each part takes its own as a constructor parameter. Raft's sentinel
// errors are mapped to gRPC codes here (raft_errors.go), registered with
// rpc/errcode.
//
// Every unary call passes errorInterceptor (errors to codes), then
// forwardInterceptor (writes and consistent reads to the leader), then
// nodeIdentityInterceptor (node_identity.go): a call only nodes make must
// carry the secret of the node it names (endpoints.CheckNodeSecret; one
// for a node without a secret is admitted or refused as the server's
// node_identity_enforcement says, (*endpoints.NodeIdentity).Check), and a
// follower that would refuse one sends it to the leader, whose state holds
// every registration it acknowledged. Tunnel.Open is checked the same way
// by the stream interceptor.
package server
