package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// route says where a method must be served.
type route int

const (
	// routeLocal methods are answered by whichever server receives them.
	routeLocal route = iota
	// routeLeader methods (writes) always run on the leader.
	routeLeader
	// routeRead methods run locally unless the query asks for consistency.
	routeRead
)

// routes lists every unary method; a method missing here is a programming
// error caught by TestEveryMethodHasARoute.
var routes = map[string]route{
	pb.Status_Ping_FullMethodName:                routeLocal,
	pb.Status_Leader_FullMethodName:              routeLocal,
	pb.Status_Peers_FullMethodName:               routeLocal,
	pb.Operator_Join_FullMethodName:              routeLeader,
	pb.Operator_RemovePeer_FullMethodName:        routeLeader,
	pb.Operator_RaftConfiguration_FullMethodName: routeRead,
	pb.Operator_Members_FullMethodName:           routeLocal,
	pb.Nodes_Register_FullMethodName:             routeLeader,
	pb.Nodes_Heartbeat_FullMethodName:            routeLeader,
	pb.Nodes_List_FullMethodName:                 routeRead,
	pb.Nodes_Get_FullMethodName:                  routeRead,

	pb.Jobs_Register_FullMethodName:             routeLeader,
	pb.Jobs_Deregister_FullMethodName:           routeLeader,
	pb.Jobs_Revert_FullMethodName:               routeLeader,
	pb.Jobs_Get_FullMethodName:                  routeRead,
	pb.Jobs_List_FullMethodName:                 routeRead,
	pb.Jobs_Versions_FullMethodName:             routeRead,
	pb.Jobs_Plan_FullMethodName:                 routeLeader,
	pb.Jobs_Allocations_FullMethodName:          routeRead,
	pb.Jobs_Evaluations_FullMethodName:          routeRead,
	pb.Allocs_Get_FullMethodName:                routeRead,
	pb.Allocs_List_FullMethodName:               routeRead,
	pb.Allocs_Stop_FullMethodName:               routeLeader,
	pb.Evals_Get_FullMethodName:                 routeRead,
	pb.Evals_List_FullMethodName:                routeRead,
	pb.NodeOps_UpdateEligibility_FullMethodName: routeLeader,
	pb.NodeOps_UpdateDrain_FullMethodName:       routeLeader,
	pb.NodeOps_UpdateFence_FullMethodName:       routeLeader,
	pb.NodeOps_Allocations_FullMethodName:       routeRead,
	pb.NodeOps_Readmit_FullMethodName:           routeLeader,
	// A client's watch is a read any server answers from its own state:
	// followers spread the clients' long polls.
	pb.ClientAllocs_Watch_FullMethodName:    routeRead,
	pb.ClientAllocs_Update_FullMethodName:   routeLeader,
	pb.System_GarbageCollect_FullMethodName: routeLeader,
	// The proxy finds the node's server itself (clientproxy).
	pb.ClientProxy_RestartAlloc_FullMethodName: routeLocal,
	pb.TunnelPeers_Locate_FullMethodName:       routeLocal,
	pb.TunnelPeers_Release_FullMethodName:      routeLocal,

	pb.CSIPlugins_UpdateNode_FullMethodName: routeLeader,
	pb.CSIPlugins_List_FullMethodName:       routeRead,
	pb.CSIPlugins_Get_FullMethodName:        routeRead,
	// The forwarder finds the node's server itself (clientproxy.CSIForwarder).
	pb.CSIRelay_ControllerCall_FullMethodName:   routeLocal,
	pb.CSIRelay_NodeDetachVolume_FullMethodName: routeLocal,
	pb.CSIRelay_NodeExpandVolume_FullMethodName: routeLocal,

	pb.Volumes_Register_FullMethodName:       routeLeader,
	pb.Volumes_Create_FullMethodName:         routeLeader,
	pb.Volumes_Delete_FullMethodName:         routeLeader,
	pb.Volumes_Deregister_FullMethodName:     routeLeader,
	pb.Volumes_Get_FullMethodName:            routeRead,
	pb.Volumes_List_FullMethodName:           routeRead,
	pb.Volumes_Claims_FullMethodName:         routeRead,
	pb.Volumes_CreateSnapshot_FullMethodName: routeLeader,
	pb.Volumes_DeleteSnapshot_FullMethodName: routeLeader,
	pb.Volumes_ListSnapshots_FullMethodName:  routeLeader,
	pb.Volumes_Expand_FullMethodName:         routeLeader,
	pb.Volumes_Detach_FullMethodName:         routeLeader,

	pb.Claims_Claim_FullMethodName:   routeLeader,
	pb.Claims_Release_FullMethodName: routeLeader,
	pb.Claims_Get_FullMethodName:     routeRead,
	// A client's wait for its claim is a read any server answers, as its
	// alloc watch.
	pb.Claims_ClientClaim_FullMethodName:       routeRead,
	pb.Claims_ClientClaimUpdate_FullMethodName: routeLeader,
	pb.Claims_ClientClaims_FullMethodName:      routeRead,

	pb.HostVolumes_Create_FullMethodName:        routeLeader,
	pb.HostVolumes_Delete_FullMethodName:        routeLeader,
	pb.HostVolumes_Get_FullMethodName:           routeRead,
	pb.HostVolumes_List_FullMethodName:          routeRead,
	pb.CSIRelay_HostVolumeCreate_FullMethodName: routeLocal,
	pb.CSIRelay_HostVolumeDelete_FullMethodName: routeLocal,
	pb.ACL_Bootstrap_FullMethodName:             routeLeader,
	pb.ACL_PolicyUpsert_FullMethodName:          routeLeader,
	pb.ACL_PolicyDelete_FullMethodName:          routeLeader,
	pb.ACL_PolicyGet_FullMethodName:             routeRead,
	pb.ACL_PolicyList_FullMethodName:            routeRead,
	pb.ACL_TokenCreate_FullMethodName:           routeLeader,
	pb.ACL_TokenUpdate_FullMethodName:           routeLeader,
	pb.ACL_TokenDelete_FullMethodName:           routeLeader,
	pb.ACL_TokenGet_FullMethodName:              routeRead,
	pb.ACL_TokenList_FullMethodName:             routeRead,
	// A token is resolved from the answering server's state.
	pb.ACL_TokenSelf_FullMethodName: routeLocal,
	pb.ACL_Authorize_FullMethodName: routeLocal,
}

// queryRequest is implemented by every read request.
type queryRequest interface {
	GetQuery() *pb.QueryOptions
}

// forwardInterceptor sends leader-only requests arriving at a follower to the
// leader and relays the answer, so callers may talk to any server.
func (s *Server) forwardInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		r, ok := routes[info.FullMethod]
		if !ok {
			return nil, status.Errorf(codes.Unimplemented, "method %s has no route", info.FullMethod)
		}
		needLeader := r == routeLeader
		if q, ok := req.(queryRequest); ok && r == routeRead && q.GetQuery().GetConsistent() {
			needLeader = true
		}
		if !needLeader {
			return handler(ctx, req)
		}
		if s.IsLeader() {
			if err := s.awaitLeaderReady(ctx, info.FullMethod); err != nil {
				return nil, err
			}
			return handler(ctx, req)
		}
		return s.forwardToLeader(ctx, info.FullMethod, req)
	}
}

// forwardToLeader sends the request of method, which arrived at this
// follower, to the leader (once: a forwarded request is never forwarded
// again) and answers the leader's reply. The node secret goes with it.
func (s *Server) forwardToLeader(ctx context.Context, method string, req any) (any, error) {
	if rpc.Forwarded(ctx) {
		return nil, status.Errorf(codes.Unavailable, "server %s received a forwarded request but is not the leader (leadership changed); retry", s.cfg.Name)
	}
	reply, err := newReply(method)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	conn, err := s.leaderConn(ctx)
	if err != nil {
		return nil, err
	}
	ctx = rpc.ForwardNodeSecret(rpc.MarkForwarded(ctx, s.id))
	if err := conn.Invoke(ctx, method, req, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// newReply allocates the response message of a full gRPC method name
// ("/berth.v1.Nodes/Register") from the generated descriptors.
func newReply(fullMethod string) (proto.Message, error) {
	svc, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return nil, fmt.Errorf("malformed method name %q", fullMethod)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("service of %s: %w", fullMethod, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("no method %s", fullMethod)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, err
	}
	return mt.New().Interface(), nil
}

// leaderRPCAddr returns the leader's RPC address, "" when no leader is known
// or its address is not yet recorded.
func (s *Server) leaderRPCAddr() (addr, id string) {
	_, lid := s.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	if string(lid) == s.id {
		return s.cfg.RPCAddr, s.id
	}
	if m, err := s.fsm.State().ServerByID(nil, string(lid)); err == nil && m != nil {
		return m.GetRpcAddr(), string(lid)
	}
	if m := s.discovery.knownByID(string(lid)); m != nil {
		return m.GetRpcAddr(), string(lid)
	}
	return "", string(lid)
}

// leaderConn waits (up to the leader wait or ctx) for a leader whose
// address is known and returns a connection to it.
func (s *Server) leaderConn(ctx context.Context) (*grpc.ClientConn, error) {
	deadline := time.Now().Add(s.opts.leaderWait)
	for {
		if addr, _ := s.leaderRPCAddr(); addr != "" {
			return s.pool.Conn(addr)
		}
		if time.Now().After(deadline) {
			return nil, status.Errorf(codes.Unavailable, "server %s knows no cluster leader after waiting %s; retry", s.cfg.Name, s.opts.leaderWait)
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-s.shutdownCtx.Done():
			return nil, status.Errorf(codes.Unavailable, "server %s is shutting down", s.cfg.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// errorInterceptor turns the errors handlers return into gRPC status codes,
// so callers branch on codes and never on message text.
func errorInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if err != nil {
			return nil, toStatus(err)
		}
		return resp, nil
	}
}

// toStatus is the status a handler's error leaves the server as: the code of
// the nearest sentinel, status or raft/context error in its chain (see
// rpc/errcode), and its whole text, which names the node or server.
func toStatus(err error) error { return errcode.Status(err) }
