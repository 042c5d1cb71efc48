package server

import (
	"context"
	"sort"

	"berth.dev/berth/rpc/pb"
)

// statusEndpoint serves Status from this server's own raft view.
type statusEndpoint struct {
	pb.UnimplementedStatusServer
	s *Server
}

func (e *statusEndpoint) Ping(_ context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	s := e.s
	if from := req.GetFrom(); from != nil && from.GetId() != s.id {
		s.discovery.observe(from)
	}
	leader, _ := s.leaderRPCAddr()
	return &pb.PingResponse{
		Server:          s.self(),
		BootstrapExpect: uint32(s.cfg.BootstrapExpect),
		HasState:        s.inCluster(),
		LeaderRpcAddr:   leader,
		Known:           s.discovery.list(),
	}, nil
}

func (e *statusEndpoint) Leader(context.Context, *pb.LeaderRequest) (*pb.LeaderResponse, error) {
	addr, id := e.s.leaderRPCAddr()
	return &pb.LeaderResponse{RpcAddr: addr, Id: id}, nil
}

func (e *statusEndpoint) Peers(context.Context, *pb.PeersRequest) (*pb.PeersResponse, error) {
	servers, err := e.s.raftServers()
	if err != nil {
		return nil, err
	}
	resp := &pb.PeersResponse{}
	for _, rs := range servers {
		if rs.GetVoter() && rs.GetRpcAddr() != "" {
			resp.RpcAddrs = append(resp.RpcAddrs, rs.GetRpcAddr())
		}
	}
	sort.Strings(resp.RpcAddrs)
	return resp, nil
}
