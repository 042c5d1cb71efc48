package server

import (
	"context"
	"errors"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/acl"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// ACLResetFileName is the file in the data dir's server directory whose
// content, the reset index an ACL bootstrap refusal names, lets the next
// bootstrap succeed once more (Nomad's acl-bootstrap-reset): the way back
// for an operator who lost the bootstrap token. Writing it needs access to
// a server's data dir, so it proves the operator runs the servers.
const ACLResetFileName = "acl-bootstrap-reset"

// aclResetFile is where this server reads the reset index from; "" without
// a data dir.
func (s *Server) aclResetFile() string {
	if s.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(s.cfg.DataDir, "server", ACLResetFileName)
}

// aclResolver is the server's one resolver of ACL tokens.
func (s *Server) aclResolver() *authz.Resolver {
	s.aclOnce.Do(func() {
		s.acl = authz.NewResolver(s.fsm.State, s.cfg.Clock.Now)
	})
	return s.acl
}

// authorize decides a call with ACL enabled: its method must be in the
// authorization table, its token known and unexpired (Unauthenticated
// otherwise) and allowed what the method and request need
// (PermissionDenied, naming the capability). A refusal is logged with the
// caller's accessor ID, never the secret.
func (s *Server) authorize(ctx context.Context, method string, req any) error {
	if !s.cfg.ACLEnabled {
		return nil
	}
	// A leader decides on the state its barrier reached: one that was a
	// follower a moment ago may still be decoding a snapshot raft
	// installed (fsm.DeferRestores), and the replaced store may still
	// hold a token since deleted.
	if s.IsLeader() {
		if err := s.awaitLeaderReady(ctx, method); err != nil {
			return err
		}
	}
	need, ok := authz.Method(method)
	if !ok {
		s.logger.Error("RPC method missing from the authorization table: refused", "method", method)
		return authz.ErrUndeclared
	}
	if ar, ok := req.(*pb.ACLAuthorizeRequest); ok {
		// The agent's question is decided here as well, so that a token
		// this follower does not know yet goes to the leader (below).
		n, err := authz.NeedOf(ar)
		if err != nil {
			return err
		}
		need = n
	}
	var extra []authz.Need
	if req != nil {
		extra = authz.Extra(method, req, func(id string, v uint64) *pb.Job {
			j, _ := s.fsm.State().JobVersion(nil, id, v)
			return j
		})
	}
	caller, err := s.aclResolver().Authorize(ctx, need, extra)
	switch {
	case err == nil:
	case caller != nil:
		s.logger.Warn("RPC refused by ACL", "method", method, "accessor_id", caller.Accessor(), "error", err)
	default:
		// No token was resolved: the error says why (unknown, expired,
		// malformed); an expired one names its accessor.
		s.logger.Warn("RPC refused by ACL: token not accepted", "method", method, "error", err)
	}
	return err
}

// aclUnaryInterceptor authorizes every unary call, after its request is
// decoded (a job's volumes add a need) and before it is forwarded: the
// leader checks a forwarded call again, with the token it carries along.
//
// A token a follower does not know may have just been made on the leader,
// its apply not yet here (`berth acl bootstrap`, then at once a command on
// another server): the call goes to the leader, whose state decides.
func (s *Server) aclUnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		err := s.authorize(ctx, info.FullMethod, req)
		if errors.Is(err, acl.ErrTokenNotFound) && !s.IsLeader() && !rpc.Forwarded(ctx) {
			return s.forwardUnary(ctx, info.FullMethod, req)
		}
		if err != nil {
			return nil, toStatus(err)
		}
		return handler(ctx, req)
	}
}

// forwardUnary sends a call to the leader, marked forwarded (it carries the
// caller's token), and relays the answer.
func (s *Server) forwardUnary(ctx context.Context, method string, req any) (any, error) {
	reply, err := newReply(method)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	conn, err := s.leaderConn(ctx)
	if err != nil {
		return nil, err
	}
	if err := conn.Invoke(rpc.MarkForwarded(ctx, s.id), method, req, reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// aclStreamInterceptor authorizes every streaming call before its first
// message is read.
func (s *Server) aclStreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := s.authorize(ss.Context(), info.FullMethod, nil); err != nil {
			return toStatus(err)
		}
		return handler(srv, ss)
	}
}
