// Package tunnel lets servers call clients over the clients' own
// connections, so a client needs no inbound port.
//
// A client opens one long-lived bidirectional gRPC stream to a server
// (Tunnel.Open, the node ID in the "berth-node-id" metadata) and the two run
// a yamux session over the stream's frames. The roles are reversed on top:
// the server is the yamux client and opens yamux streams, each carrying the
// HTTP/2 connection of a *grpc.ClientConn; the client is the yamux server and
// serves a *grpc.Server (ClientRPC, registered by the caller) on the
// session's accepted streams. yamux gives the session per-stream flow
// control and a keepalive that closes a dead session; gRPC on top gives
// deadlines, cancellation and codes, as on any other berth connection, with
// rpc.MaxMessageSize on both ends.
//
// Server side: Registry is the Tunnel service. It keeps one Session per node
// (a node that opens a new tunnel replaces its older one, which is closed),
// and Registry.Session returns the session whose Conn calls the node. Every
// error of a call made over that Conn names the node and keeps its code. The
// node says when it opened each tunnel, by its own clock (OpenedAtHeader),
// so servers can order a node's tunnels among them: Registry.CloseOlder
// closes a tunnel the node replaced with one to another server, and
// RegistryConfig.OnOpen lets a server tell the others when that happens.
//
// Client side: Start keeps a tunnel open. When the stream breaks (the server
// went away, the keepalive failed) it dials again with a capped backoff,
// moving to the next server of the list the caller supplies, so it follows
// the client's server failover; the new session replaces the old
// registration on whichever server it reaches.
package tunnel
