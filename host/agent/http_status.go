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
		}
	}
	if c := a.client; c != nil {
		info.Client = &pb.AgentClientInfo{NodeId: c.NodeID(), Registered: c.Registered(), Servers: a.rpcAddrs}
	}
	return writeProto(w, info)
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
	return writeProtoList(w, resp.GetMembers())
}
