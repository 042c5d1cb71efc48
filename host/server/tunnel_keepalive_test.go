package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"berth.dev/berth/host/server/nodes"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// readyNodes is n ready nodes, for a Heartbeater's TTL.
type readyNodes int

func (r readyNodes) Nodes() ([]*pb.Node, error) {
	out := make([]*pb.Node, int(r))
	for i := range out {
		out[i] = &pb.Node{Id: fmt.Sprintf("n%d", i), Status: pb.NodeStatus_NODE_STATUS_READY}
	}
	return out, nil
}
func (readyNodes) NodeByID(string) (*pb.Node, error)                      { return nil, nil }
func (readyNodes) MarkDown(context.Context, string, string, uint64) error { return nil }
func (readyNodes) MarkReady(context.Context, string) error                { return nil }

// The nodes' tunnels ping no more often than a third of the TTL the nodes
// are told, which grows with them: 10,000 nodes at 50 heartbeats/s are
// told 686 s, and their tunnels ping every 228 s, not every 10 s (nodesim:
// 2,000 pings a second against 50 heartbeats). A small cluster keeps the
// 10 s default.
func TestTunnelKeepaliveFollowsTheTTL(t *testing.T) {
	for _, c := range []struct {
		nodes int
		want  time.Duration
	}{{3, tunnel.DefaultKeepAliveInterval}, {10000, nodes.ScaledTTL(10*time.Second, 50, 10000) / 3}} {
		h := nodes.NewHeartbeater(readyNodes(c.nodes), clock.Real{}, 10*time.Second, 10*time.Second, testutil.Logger(t)).WithMaxPerSecond(50)
		k := tunnelKeepalive(h)
		if got := max(tunnel.DefaultKeepAliveInterval, k.AtLeast()); got != c.want {
			t.Errorf("%d nodes: tunnels ping every %s, want %s", c.nodes, got, c.want)
		}
	}
}
