// Package authz is berth's one authorization table: what every HTTP route
// and every gRPC method needs of its caller, and the request-dependent needs
// on top of it (a job that mounts a CSI volume). The agent's HTTP router
// and the servers' RPC interceptors both read it, and their tests walk
// every registered route and method and fail on one the table does not
// declare.
//
// A need is one of:
//   - None: anyone may call (health and status, the one-time bootstrap).
//   - Token: any valid token, whatever its policies (token self).
//   - Node: a node-identity RPC a client agent makes for itself (register,
//     heartbeat, alloc watch and updates, claim reads and reports): node
//     identity, not ACL, secures it.
//   - Server: a call between servers, or from a server to a client over its
//     tunnel (join, tunnel peers, relays): the servers' transport secures it.
//   - a capability on a resource (job submit-job, operator write…), which a
//     management token always has.
//
// With ACL enabled a request's token is resolved first (unknown or expired:
// 401), then checked against the need (403 naming the capability). With ACL
// disabled nothing is checked.
package authz
