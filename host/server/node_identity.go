package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// nodeMethods are the calls only a node makes, each naming the node it
// acts as (node_id): the call must carry that node's secret
// (endpoints.CheckNodeSecret), and one for a node without a secret is
// admitted or refused as the enforcement says ((*endpoints.NodeIdentity).Check). Nodes.Register checks it itself, since it
// also admits secrets (endpoints.identify); Tunnel.Open, a stream, is
// checked by nodeIdentityStreamInterceptor.
var nodeMethods = map[string]bool{
	pb.Nodes_Heartbeat_FullMethodName:          true,
	pb.ClientAllocs_Watch_FullMethodName:       true,
	pb.ClientAllocs_Update_FullMethodName:      true,
	pb.Claims_ClientClaim_FullMethodName:       true,
	pb.Claims_ClientClaimUpdate_FullMethodName: true,
	pb.Claims_ClientClaims_FullMethodName:      true,
	pb.CSIPlugins_UpdateNode_FullMethodName:    true,
}

// nodeRequest is every request of nodeMethods.
type nodeRequest interface{ GetNodeId() string }

// nodeIdentityInterceptor refuses a node call that does not carry the
// secret of the node it names. It runs where the call is served (after
// forwardInterceptor). A follower's state may be behind the registration
// that admitted the secret (or a readmit): there, a refusal is not final and
// the call goes to the leader, whose state holds every registration it
// acknowledged.
func (s *Server) nodeIdentityInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !nodeMethods[info.FullMethod] {
			return handler(ctx, req)
		}
		nr, ok := req.(nodeRequest)
		if !ok {
			return handler(ctx, req)
		}
		err := s.nodeIdentity.Check(s.State(), info.FullMethod, nr.GetNodeId(), rpc.NodeSecret(ctx))
		switch {
		case err == nil:
			return handler(ctx, req)
		case !s.IsLeader() && !rpc.Forwarded(ctx):
			return s.forwardToLeader(ctx, info.FullMethod, req)
		}
		return nil, err
	}
}

// nodeIdentityStreamInterceptor checks Tunnel.Open: the node the stream
// names (tunnel.NodeIDHeader) must be the one whose secret it carries, so
// no one registers a tunnel for another node and receives its calls
// (volume stage and publish requests, with their secrets).
func (s *Server) nodeIdentityStreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != pb.Tunnel_Open_FullMethodName {
			return handler(srv, ss)
		}
		md, _ := metadata.FromIncomingContext(ss.Context())
		var nodeID string
		if v := md.Get(tunnel.NodeIDHeader); len(v) > 0 {
			nodeID = v[0]
		}
		if err := s.nodeIdentity.Check(s.State(), info.FullMethod, nodeID, rpc.NodeSecret(ss.Context())); err != nil {
			return errcode.Status(err)
		}
		return handler(srv, ss)
	}
}
