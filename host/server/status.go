package server

import (
	"context"
	"sort"

	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/rpc/pb"
)

// statusEndpoint serves Status from this server's own raft view.
type statusEndpoint struct {
	pb.UnimplementedStatusServer
	s *Server
}

func (e *statusEndpoint) Ping(ctx context.Context, req *pb.PingRequest) (*pb.PingResponse, error) {
	s := e.s
	s.observePinger(ctx, req.GetFrom())
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

func (e *statusEndpoint) Peers(_ context.Context, req *pb.PeersRequest) (*pb.PeersResponse, error) {
	q := req.GetQuery()
	if err := endpoints.RefuseBlocking(q, "peers", "the list is the raft configuration, read at request time"); err != nil {
		return nil, err
	}
	n, err := endpoints.PerPage(q)
	if err != nil {
		return nil, err
	}
	servers, err := e.s.raftServers()
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, rs := range servers {
		if rs.GetVoter() && rs.GetRpcAddr() != "" {
			addrs = append(addrs, rs.GetRpcAddr())
		}
	}
	sort.Strings(addrs)
	resp := &pb.PeersResponse{Meta: e.s.queryMeta(e.s.raft.AppliedIndex())}
	resp.RpcAddrs, resp.Meta.NextToken = endpoints.PageOf(addrs, func(a string) string { return a }, q.GetNextToken(), n, nil)
	return resp, nil
}
