package clientproxy

import (
	"context"
	"fmt"
	"time"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// Peers is the TunnelPeers service: what servers ask each other
// about the nodes' tunnels (see Proxy.Find).
type Peers struct {
	pb.UnimplementedTunnelPeersServer
	p *Proxy
}

var _ pb.TunnelPeersServer = (*Peers)(nil)

// NewPeers returns the TunnelPeers service of p's server.
func NewPeers(p *Proxy) *Peers { return &Peers{p: p} }

// locate asks every other server whether it holds nodeID's tunnel and
// returns the one whose session is newest, with the time it opened (nil
// when none does). It waits for every answer, bounded by locateTimeout: a
// node has one live tunnel, but a server whose tunnel the node left
// without a word (a partition) holds the old one until its keepalive
// closes it, and only the newest is live. Servers answer in a round trip,
// so waiting for all costs nothing unless one is unreachable.
func (p *Proxy) locate(ctx context.Context, nodeID string) (*pb.ServerMember, time.Time, error) {
	members, err := p.cfg.Servers()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("locating node %s: reading the servers: %w", nodeID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.locateTimeout)
	defer cancel()
	type answer struct {
		m  *pb.ServerMember
		at time.Time
	}
	answers := make(chan answer, len(members))
	asked := 0
	for _, m := range members {
		if m.GetId() == p.cfg.ID || m.GetRpcAddr() == "" {
			continue
		}
		asked++
		go func() {
			conn, err := p.cfg.Pool.Conn(m.GetRpcAddr())
			if err == nil {
				var resp *pb.LocateNodeResponse
				resp, err = pb.NewTunnelPeersClient(conn).Locate(ctx, &pb.LocateNodeRequest{NodeId: nodeID})
				if err == nil && resp.GetConnected() {
					answers <- answer{m, time.Unix(0, resp.GetConnectedAt())}
					return
				}
			}
			if err != nil {
				p.logger.Debug("asking a server for a node's tunnel", "server", m.GetName(), "node_id", nodeID, "error", err)
			}
			answers <- answer{}
		}()
	}
	var best answer
	for range asked {
		if a := <-answers; a.m != nil && (best.m == nil || a.at.After(best.at)) {
			best = a
		}
	}
	return best.m, best.at, nil
}

// Locate answers whether nodeID's tunnel is connected to this server.
func (t *Peers) Locate(_ context.Context, req *pb.LocateNodeRequest) (*pb.LocateNodeResponse, error) {
	p := t.p
	resp := &pb.LocateNodeResponse{ServerId: p.cfg.ID}
	if sess, ok := p.tunnels.Session(req.GetNodeId()); ok {
		resp.Connected = true
		resp.ConnectedAt = sess.OpenedAt().UnixNano()
	}
	return resp, nil
}

// Release closes this server's tunnel of a node that opened a newer one to
// another server.
func (t *Peers) Release(_ context.Context, req *pb.ReleaseNodeRequest) (*pb.ReleaseNodeResponse, error) {
	p := t.p
	released := p.tunnels.CloseOlder(req.GetNodeId(), time.Unix(0, req.GetOpenedAt()))
	return &pb.ReleaseNodeResponse{Released: released}, nil
}

// ReleaseElsewhere tells the other servers that sess is the node's newest
// tunnel, so one still holding an older tunnel (the node left it without a
// word) closes it now rather than when its keepalive notices. Best effort,
// in the background: a server that does not hear of it still closes the
// old tunnel by keepalive, and lookups take the newest tunnel anyway.
func (p *Proxy) ReleaseElsewhere(sess *tunnel.Session) {
	if p.lostReleases {
		return
	}
	members, err := p.cfg.Servers()
	if err != nil {
		return
	}
	req := &pb.ReleaseNodeRequest{NodeId: sess.NodeID(), OpenedAt: sess.OpenedAt().UnixNano(), ServerId: p.cfg.ID}
	for _, m := range members {
		if m.GetId() == p.cfg.ID || m.GetRpcAddr() == "" {
			continue
		}
		p.cfg.Go(func() {
			ctx, cancel := context.WithTimeout(p.cfg.Done, p.locateTimeout)
			defer cancel()
			conn, err := p.cfg.Pool.Conn(m.GetRpcAddr())
			if err == nil {
				_, err = pb.NewTunnelPeersClient(conn).Release(p.forwardContext(ctx), req)
			}
			if err != nil {
				p.logger.Debug("telling a server a node has a newer tunnel", "server", m.GetName(), "node_id", sess.NodeID(), "error", err)
			}
		})
	}
}
