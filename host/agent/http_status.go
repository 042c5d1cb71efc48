package agent

import (
	"context"
	"net/http"

	"google.golang.org/grpc"

	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
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

// statusPeers is GET /v1/status/peers: one page of the voters' RPC
// addresses, a JSON array of strings as Nomad and Consul answer.
func (a *Agent) statusPeers(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.PeersResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewStatusClient(c).Peers(ctx, &pb.PeersRequest{Query: q})
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	peers := resp.GetRpcAddrs()
	if peers == nil {
		peers = []string{}
	}
	return writeJSON(w, peers)
}

func (a *Agent) agentSelf(w http.ResponseWriter, _ *http.Request) error {
	name, _ := a.cfg.AgentName()
	info := &pb.AgentSelf{Name: name, Version: version.Version, DataDir: a.dataDir, HttpAddr: a.HTTPAddr(), DevMode: a.cfg.DevMode}
	if s := a.server; s != nil {
		r := s.Raft()
		_, leader := r.LeaderWithID()
		info.Server = &pb.AgentServerInfo{
			Id:              s.ID(),
			RpcAddr:         a.rpcAddrs[0],
			RaftAddr:        s.RaftAddr(),
			RaftState:       r.State().String(),
			LeaderId:        string(leader),
			LastIndex:       r.LastIndex(),
			AppliedIndex:    r.AppliedIndex(),
			BootstrapExpect: uint32(a.cfg.Server.BootstrapExpect),
			RetryJoin:       a.cfg.Server.RetryJoin,
			JobLimits:       a.cfg.Server.JobLimits.Proto(),
		}
	}
	if c := a.client; c != nil {
		info.Client = &pb.AgentClientInfo{NodeId: c.NodeID(), Registered: c.Registered(), Servers: a.rpcAddrs}
	}
	return writeProto(w, info)
}

// agentMembers is GET /v1/agent/members: one page of the servers with their
// liveness, pinged at request time.
func (a *Agent) agentMembers(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	var resp *pb.MembersResponse
	err = a.rpcCall(r.Context(), func(ctx context.Context, c *grpc.ClientConn) (err error) {
		resp, err = pb.NewOperatorClient(c).Members(ctx, &pb.MembersRequest{Query: q})
		return err
	})
	if err != nil {
		return err
	}
	setQueryHeaders(w, resp.GetMeta())
	return writeProtoList(w, resp.GetMembers())
}
