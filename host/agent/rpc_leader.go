package agent

import (
	"context"

	"google.golang.org/grpc"

	"berth.dev/berth/host/server"
	"berth.dev/berth/internal/tlsconf"
)

// rpcDialOptions are the options of the agent's RPC connections (its
// pool): TLS when tls.rpc is on, and leaderDirect.
func (a *Agent) rpcDialOptions() []grpc.DialOption {
	local := func() leaderLocator {
		if a.server == nil {
			return nil
		}
		return a.server
	}
	conn := func(addr string) (*grpc.ClientConn, error) { return a.pool.Conn(addr) }
	return append(tlsconf.DialOptions(a.rpcTLS()), grpc.WithChainUnaryInterceptor(leaderDirect(local, conn)))
}

// leaderLocator is what leaderDirect asks the agent's own server
// (*server.Server).
type leaderLocator interface {
	RPCAddr() string
	OtherLeaderRPCAddr() string
}

// leaderDirect is the client interceptor of the agent's RPC connections. On
// a server agent whose server follows, a leader-only call (a write: job
// register, volume register, an operator's claim…) that the HTTP API makes
// to its own server goes to the leader directly. Through the local server
// it took one gRPC hop more: the agent to its server over loopback, then the
// server's forward to the leader (forwardInterceptor). On a loaded machine
// each hop waits for threads of two processes to be scheduled: the
// simulator's job registers through a follower's API spent ~40 ms of
// ~270 ms in the extra hop (bench section scale).
//
// The call is not marked forwarded, so a server that stopped leading
// meanwhile forwards it once to the new leader, as the local server would
// have; its ACL token goes with it in the call's metadata and the leader
// checks it, as it did after a forward. A call to another address (a
// client-only agent's servers, the leader itself), a read, or a call while
// the local server leads or knows no leader (it waits for one) goes where
// it was sent. local returns nil on an agent without a server; conn is the
// pool's connection to an address.
func leaderDirect(local func() leaderLocator, conn func(addr string) (*grpc.ClientConn, error)) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		srv := local()
		if srv == nil || cc.Target() != srv.RPCAddr() || !server.LeaderOnly(method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		addr := srv.OtherLeaderRPCAddr()
		if addr == "" || addr == cc.Target() {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		lc, err := conn(addr)
		if err != nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		return lc.Invoke(ctx, method, req, reply, opts...)
	}
}
