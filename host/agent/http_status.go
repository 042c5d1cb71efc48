package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/version"
)

func (a *Agent) statusLeader(w http.ResponseWriter, r *http.Request) error {
	var resp *pb.LeaderResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewStatusClient(c).Leader(ctx, &pb.LeaderRequest{})
		return err
	})
	if err != nil {
		return err
	}
	return writeJSON(w, resp.GetRpcAddr())
}

func (a *Agent) statusPeers(w http.ResponseWriter, r *http.Request) error {
	var resp *pb.PeersResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewStatusClient(c).Peers(ctx, &pb.PeersRequest{})
		return err
	})
	if err != nil {
		return err
	}
	peers := resp.GetRpcAddrs()
	if peers == nil {
		peers = []string{}
	}
	return writeJSON(w, peers)
}

// selfInfo is the body of GET /v1/agent/self.
type selfInfo struct {
	Name     string      `json:"name"`
	Version  string      `json:"version"`
	DataDir  string      `json:"data_dir"`
	HTTPAddr string      `json:"http_addr"`
	DevMode  bool        `json:"dev_mode"`
	Server   *serverInfo `json:"server,omitempty"`
	Client   *clientInfo `json:"client,omitempty"`
}

type serverInfo struct {
	ID              string   `json:"id"`
	RPCAddr         string   `json:"rpc_addr"`
	RaftAddr        string   `json:"raft_addr"`
	RaftState       string   `json:"raft_state"`
	LeaderID        string   `json:"leader_id"`
	LastIndex       uint64   `json:"last_index"`
	AppliedIndex    uint64   `json:"applied_index"`
	BootstrapExpect int      `json:"bootstrap_expect"`
	RetryJoin       []string `json:"retry_join"`
}

type clientInfo struct {
	NodeID     string   `json:"node_id"`
	Registered bool     `json:"registered"`
	Servers    []string `json:"servers"`
}

func (a *Agent) agentSelf(w http.ResponseWriter, _ *http.Request) error {
	name, _ := a.cfg.AgentName()
	info := selfInfo{Name: name, Version: version.Version, DataDir: a.dataDir, HTTPAddr: a.HTTPAddr(), DevMode: a.cfg.DevMode}
	if s := a.server; s != nil {
		r := s.Raft()
		_, leader := r.LeaderWithID()
		info.Server = &serverInfo{
			ID:              s.ID(),
			RPCAddr:         a.rpcAddrs[0],
			RaftAddr:        s.RaftAddr(),
			RaftState:       r.State().String(),
			LeaderID:        string(leader),
			LastIndex:       r.LastIndex(),
			AppliedIndex:    r.AppliedIndex(),
			BootstrapExpect: a.cfg.Server.BootstrapExpect,
			RetryJoin:       a.cfg.Server.RetryJoin,
		}
	}
	if c := a.client; c != nil {
		info.Client = &clientInfo{NodeID: c.NodeID(), Registered: c.Registered(), Servers: a.rpcAddrs}
	}
	return writeJSON(w, info)
}

func (a *Agent) agentMembers(w http.ResponseWriter, r *http.Request) error {
	var resp *pb.MembersResponse
	err := a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewOperatorClient(c).Members(ctx, &pb.MembersRequest{})
		return err
	})
	if err != nil {
		return err
	}
	out, err := protoList(resp.GetMembers())
	if err != nil {
		return err
	}
	return writeJSON(w, out)
}
