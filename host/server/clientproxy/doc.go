// Package clientproxy is how servers call clients: over the tunnel each
// node keeps open to one server, from that server or through it.
//
// Proxy is the ClientProxy service (restart an alloc, stream a task's log):
// an API handler calls it on any server; it finds the node's tunnel here or
// asks the other servers (Peers, the TunnelPeers service) and forwards the
// call, one hop at most, to the server that holds the newest one. Unary
// calls have a deadline per attempt and are retried while the node may
// have moved (Unavailable, DeadlineExceeded); a log stream is retried
// only until it relayed data.
//
// CSIForwarder makes the servers' CSI controller calls the same way: each
// goes to a plugin's controller instance on a client (ClientCSI), from this
// server or through the server holding the node's tunnel (CSIRelay, the
// service that server answers it with). The volume loops and the volume
// endpoints use it through their own small interface.
// NodeDetachVolume (`berth volume detach`) travels the same way to the
// node's ClientCSI: the node tears down the listed users' uses of a
// volume; tried again on Unavailable only (the teardown is idempotent) —
// the node's own answers, its DeadlineExceeded included, are passed on
// with its code and message.
// endpoints use it through their own small interface. NodeExpand takes
// the same way to a node's volume manager (ClientCSI and CSIRelay
// NodeExpandVolume), for volume expand's node expansions.
//
// The server core builds one Proxy with New for its whole life, from a
// Config of what the proxy needs of it (its ID and name, the connection
// pool, the tunnel registry, the server list in its state, its shutdown),
// and registers Proxy, NewPeers(p) and NewCSIRelay(f) on its gRPC server.
// It calls ReleaseElsewhere when a node opens a tunnel, so a server still
// holding an older one closes it.
package clientproxy
