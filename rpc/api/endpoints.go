package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"berth.dev/berth/rpc/pb"
)

// Leader returns the leader's RPC address, "" when there is none.
func (c *Client) Leader(ctx context.Context) (string, error) {
	var out string
	_, err := c.getJSON(ctx, "/v1/status/leader", nil, &out)
	return out, err
}

// Peers returns one page of the voters' RPC addresses, sorted (NextToken:
// an address).
func (c *Client) Peers(ctx context.Context, q *QueryOptions) ([]string, *QueryMeta, error) {
	var out []string
	meta, err := c.getJSON(ctx, "/v1/status/peers", q, &out)
	return out, meta, err
}

// AgentSelf describes the agent the client talks to.
func (c *Client) AgentSelf(ctx context.Context) (*pb.AgentSelf, error) {
	out := &pb.AgentSelf{}
	_, err := c.getJSON(ctx, "/v1/agent/self", nil, out)
	return out, err
}

// Members returns one page of the servers with their liveness, by server ID.
func (c *Client) Members(ctx context.Context, q *QueryOptions) ([]*pb.Member, *QueryMeta, error) {
	return getList(ctx, c, "/v1/agent/members", q, func() *pb.Member { return &pb.Member{} })
}

// Nodes returns one page of the registered nodes in ID order; q.Params
// may filter ({"status": "ready"}). AllPages(ctx, q, c.Nodes) reads them all.
func (c *Client) Nodes(ctx context.Context, q *QueryOptions) ([]*pb.Node, *QueryMeta, error) {
	return getList(ctx, c, "/v1/nodes", q, func() *pb.Node { return &pb.Node{} })
}

// Node returns one node by ID.
func (c *Client) Node(ctx context.Context, id string, q *QueryOptions) (*pb.Node, *QueryMeta, error) {
	out := &pb.Node{}
	meta, err := c.getJSON(ctx, "/v1/node/"+url.PathEscape(id), q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// RaftConfiguration returns the raft configuration with one page of its
// servers, by server ID.
func (c *Client) RaftConfiguration(ctx context.Context, q *QueryOptions) (*pb.RaftConfigurationResponse, *QueryMeta, error) {
	out := &pb.RaftConfigurationResponse{}
	meta, err := c.getJSON(ctx, "/v1/operator/raft/configuration", q, out)
	if err != nil {
		return nil, nil, err
	}
	return out, meta, nil
}

// RemovePeer removes a server (force-leave) named by its ID, name or RPC
// address.
func (c *Client) RemovePeer(ctx context.Context, peer string) (*pb.RemovePeerResponse, error) {
	if peer == "" {
		return nil, fmt.Errorf("api: RemovePeer needs a server id, name or address")
	}
	resp, err := c.do(ctx, http.MethodDelete, "/v1/operator/raft/peer", url.Values{"peer": {peer}}, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := &pb.RemovePeerResponse{}
	return out, decode(resp.Body, out)
}

// SnapshotSave writes a snapshot archive of the cluster state to w.
func (c *Client) SnapshotSave(ctx context.Context, w io.Writer) (int64, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/operator/snapshot", nil, nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("snapshot download interrupted after %d bytes: %w", n, err)
	}
	return n, nil
}

// SnapshotRestore replaces the cluster state with the archive read from r.
func (c *Client) SnapshotRestore(ctx context.Context, r io.Reader) (*pb.SnapshotRestoreResponse, error) {
	resp, err := c.do(ctx, http.MethodPut, "/v1/operator/snapshot", nil, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := &pb.SnapshotRestoreResponse{}
	return out, decode(resp.Body, out)
}
