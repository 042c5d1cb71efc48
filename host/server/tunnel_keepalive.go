package server

import (
	"time"

	"berth.dev/berth/host/server/nodes"
	"berth.dev/berth/rpc/tunnel"
)

// tunnelKeepalive is the keepalive of the nodes' tunnels to this server: a
// session pings no more often than a third of the heartbeat TTL the nodes
// are told now, which grows with their number (nodes.ScaledTTL), so at
// 10,000 nodes the tunnels cost the servers about what the heartbeats do
// instead of 2,000 pings a second.
func tunnelKeepalive(h *nodes.Heartbeater) tunnel.Keepalive {
	return tunnel.Keepalive{AtLeast: func() time.Duration { return h.TTL() / 3 }}
}
