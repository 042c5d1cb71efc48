package server

// LeaderOnly reports whether method (a full gRPC method name,
// "/berth.v1.Jobs/Register") is served only by the leader: a write, which a
// follower forwards (routes, forwardInterceptor). Unknown methods are not.
func LeaderOnly(method string) bool { return routes[method] == routeLeader }

// OtherLeaderRPCAddr returns the RPC address of the leader when another
// server leads and its address is known; "" when this server leads or no
// leader is known. A caller in this server's process (the agent's HTTP
// API) sends a leader-only call there itself rather than through this
// server, which would forward it: one gRPC hop fewer per write.
func (s *Server) OtherLeaderRPCAddr() string {
	addr, id := s.leaderRPCAddr()
	if id == "" || id == s.id {
		return ""
	}
	return addr
}
