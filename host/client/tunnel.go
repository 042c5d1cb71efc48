package client

import (
	"slices"
	"time"

	"google.golang.org/grpc"

	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// tunnelRetryStart is the tunnel's first reconnect wait; later waits
// double up to maxRetry, as the client's other server retries do.
const tunnelRetryStart = 100 * time.Millisecond

// startTunnel keeps the node's tunnel open, so the servers reach its
// ClientRPC (alloc logs, restart) without an inbound port on this host.
func (c *Client) startTunnel() error {
	rpcSvc := &clientRPC{nodeID: c.nodeID, allocs: c.rpcAllocs(), logs: c.cfg.logOptions}
	csiSvc := &clientCSI{nodeID: c.nodeID, plugins: c.csiControllers, detach: c.csiDetacher(), expander: c.csiExpander,
		hostVolumes: c.dynamicVolumes}
	t, err := tunnel.Start(tunnel.ClientConfig{
		NodeID:  c.nodeID,
		Servers: c.tunnelServers,
		Conn:    c.pool.Conn,
		Register: func(r grpc.ServiceRegistrar) {
			pb.RegisterClientRPCServer(r, rpcSvc)
			pb.RegisterClientCSIServer(r, csiSvc)
		},
		Keepalive: c.tunnelKeepalive(),
		Backoff:   backoff.Backoff{Initial: tunnelRetryStart, Max: maxRetry},
		Logger:    c.logger.Named("tunnel"),
	})
	if err != nil {
		return err
	}
	c.tunnel = t
	return nil
}

// tunnelKeepalive is the tunnel's keepalive: a test's, else the default
// pinging no more often than a third of the heartbeat TTL, which grows
// with the cluster (tunnel.Keepalive).
func (c *Client) tunnelKeepalive() tunnel.Keepalive {
	if k := c.cfg.tunnelKeepalive; k.Interval > 0 || k.Timeout > 0 {
		return k
	}
	return tunnel.Keepalive{AtLeast: func() time.Duration { return c.currentTTL() / 3 }}
}

// rpcAllocs is the alloc side ClientRPC serves: the one a test configured,
// else the client's own alloc runners (a client without them refuses with
// ErrNoAllocRuntime).
func (c *Client) rpcAllocs() allocAccess {
	if c.cfg.allocAccess != nil {
		return c.cfg.allocAccess
	}
	return c
}

// tunnelServers is the server list in the order the tunnel tries it: from
// the server that answered the node's last call, as the heartbeats do, so
// the tunnel follows the client's failover.
func (c *Client) tunnelServers() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.servers) == 0 {
		return nil
	}
	start := c.next % len(c.servers)
	return append(slices.Clone(c.servers[start:]), c.servers[:start]...)
}

// TunnelServer returns the server the node's tunnel is open to, "" while
// it reconnects.
func (c *Client) TunnelServer() string {
	if c.tunnel == nil {
		return ""
	}
	return c.tunnel.Server()
}
