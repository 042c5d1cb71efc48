package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"berth.dev/berth/host/authz"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrServerOnly is returned, with verify_server_hostname, to a caller that
// calls a server-only method (a server joining, the servers' tunnel and CSI
// relays, any forwarded request) without a server certificate.
var ErrServerOnly = errcode.New(codes.PermissionDenied, "rpc: a server-only method needs a server certificate")

// ErrNodeRole is returned, with verify_server_hostname, to a caller that
// calls a node's method (register, heartbeat, watch, tunnel...) with a
// certificate of neither a client nor a server (a cli one).
var ErrNodeRole = errcode.New(codes.PermissionDenied, "rpc: a node's method needs a client or server certificate")

// isServerOnly reports whether a call of fullMethod with ctx's metadata
// is one only a server makes: a method the authorization table gives the
// Server kind (a server joining, the servers' tunnel and CSI relays), or
// any request another server forwarded (it is trusted to have been checked
// there). One table decides both ACL and this check.
func isServerOnly(ctx context.Context, fullMethod string) bool {
	if rpc.Forwarded(ctx) {
		return true
	}
	need, ok := authz.Method(fullMethod)
	return ok && need.Kind == authz.Server
}

// isNodeMethod reports whether fullMethod is one a node makes for itself
// (authz.Node: register, heartbeat, alloc watch and updates, claims, CSI
// updates, the tunnel).
func isNodeMethod(fullMethod string) bool {
	need, ok := authz.Method(fullMethod)
	return ok && need.Kind == authz.Node
}

// peerHasRole reports whether ctx's caller may act in one of roles: always
// without verify_server_hostname, else only when it presented a
// certificate naming one of them in this server's region. subject names
// what it presented, for logs and errors.
func (s *Server) peerHasRole(ctx context.Context, roles ...tlsconf.Role) (ok bool, subject string) {
	if s.cfg.TLS == nil || !s.cfg.TLS.Options().VerifyServerHostname {
		return true, ""
	}
	p, found := peer.FromContext(ctx)
	if !found {
		return false, "no certificate"
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS || len(info.State.PeerCertificates) == 0 {
		return false, "no certificate"
	}
	leaf := info.State.PeerCertificates[0]
	region := s.cfg.TLS.Options().Region
	return slices.ContainsFunc(roles, func(r tlsconf.Role) bool { return tlsconf.HasRole(leaf, r, region) }),
		fmt.Sprintf("%q", leaf.Subject.CommonName)
}

// peerIsServer reports whether ctx's caller may act as a server: always
// without verify_server_hostname, else only when it presented a server
// certificate.
func (s *Server) peerIsServer(ctx context.Context) (ok bool, subject string) {
	return s.peerHasRole(ctx, tlsconf.RoleServer)
}

// checkServerRole refuses a server-only call whose peer did not present a
// server certificate, and a node's call (isNodeMethod) whose peer
// presented neither a client nor a server certificate: a cli certificate
// is an operator's, not a node's.
func (s *Server) checkServerRole(ctx context.Context, fullMethod string) error {
	if isServerOnly(ctx, fullMethod) {
		ok, subject := s.peerIsServer(ctx)
		if ok {
			return nil
		}
		s.logger.Warn("server-only call refused", "method", fullMethod, "peer", subject)
		return fmt.Errorf("%w: %s called with %s", ErrServerOnly, fullMethod, subject)
	}
	if isNodeMethod(fullMethod) {
		if ok, subject := s.peerHasRole(ctx, tlsconf.RoleClient, tlsconf.RoleServer); !ok {
			s.logger.Warn("node call refused: the caller has no client or server certificate", "method", fullMethod, "peer", subject)
			return fmt.Errorf("%w: %s called with %s", ErrNodeRole, fullMethod, subject)
		}
	}
	return nil
}

// observePinger records the server a Ping says it comes from. Ping is open
// to every certificate (nodes and the CLI ask for status), so under
// verify_server_hostname From counts only when the caller presented a
// server certificate: any other could poison discovery with servers that
// never expire, spread to peers, and hold up bootstrap_expect.
func (s *Server) observePinger(ctx context.Context, from *pb.ServerMember) {
	if from == nil || from.GetId() == s.id {
		return
	}
	if ok, subject := s.peerIsServer(ctx); !ok {
		s.logger.Warn("ping's from ignored: the caller has no server certificate", "peer", subject, "claimed_id", from.GetId(), "claimed_addr", from.GetRpcAddr())
		return
	}
	s.discovery.observe(from)
}

// tlsServerOptions are the gRPC server's options under TLS: mutual TLS on
// the RPC listener and, with verify_server_hostname, the role check of the
// server-only methods and the nodes' methods (checkServerRole) ahead of
// every other interceptor.
func (s *Server) tlsServerOptions() []grpc.ServerOption {
	if s.cfg.TLS == nil {
		return nil
	}
	opts := []grpc.ServerOption{grpc.Creds(credentials.NewTLS(s.cfg.TLS.ServerConfig()))}
	if s.cfg.TLS.Options().VerifyServerHostname {
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := s.checkServerRole(ctx, info.FullMethod); err != nil {
					return nil, errcode.Status(err)
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := s.checkServerRole(ss.Context(), info.FullMethod); err != nil {
					return errcode.Status(err)
				}
				return h(srv, ss)
			}))
	}
	return opts
}

// tlsStreamLayer is raft's transport under TLS: a TLS listener on the raft
// address that, with verify_server_hostname, completes handshakes only with
// server certificates, and a dialer presenting this server's certificate
// and checking the peer's.
type tlsStreamLayer struct {
	tcp   net.Listener
	addr  net.Addr
	store *tlsconf.Store
	// handshakeTimeout is raftHandshakeTimeout but in tests.
	handshakeTimeout time.Duration
	// dialContext opens the connection Dial runs TLS over: TCP but in
	// tests.
	dialContext func(ctx context.Context, network, address string) (net.Conn, error)
}

// raftHandshakeTimeout bounds a raft peer's TLS handshake: a connection
// that does not complete one in time is closed, so an unauthenticated peer
// cannot hold raft's connection handlers.
const raftHandshakeTimeout = 10 * time.Second

// NewTLSStreamLayer is raft's stream layer under TLS (what a server with
// tls.rpc runs raft over; exported for bench). It listens on bind and, like
// raft's TCP transport, advertises the address it bound, which must be one
// peers can reach.
func NewTLSStreamLayer(bind string, store *tlsconf.Store) (raft.StreamLayer, error) {
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().(*net.TCPAddr)
	if ip, ok := netip.AddrFromSlice(addr.IP); !ok || ip.IsUnspecified() {
		lis.Close()
		return nil, fmt.Errorf("raft address %s cannot be advertised to peers", addr)
	}
	return &tlsStreamLayer{tcp: lis, addr: addr, store: store, handshakeTimeout: raftHandshakeTimeout,
		dialContext: (&net.Dialer{}).DialContext}, nil
}

// Accept returns the next connection; its handshake runs at its first read
// or write, within raftHandshakeTimeout.
func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.tcp.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.store.PeerConfig()), timeout: l.handshakeTimeout}, nil
}

func (l *tlsStreamLayer) Close() error   { return l.tcp.Close() }
func (l *tlsStreamLayer) Addr() net.Addr { return l.addr }

// handshakeConn completes its TLS handshake under a deadline before the
// first read or write; a failed one closes the connection. The deadline is
// the handshake's context, not one set on the connection: raft pools its
// connections and pipelines AppendEntries on one for as long as it lives,
// and a deadline left set would kill each one raftHandshakeTimeout after
// it was accepted, to be redialled with a full handshake.
type handshakeConn struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			_ = c.Conn.Close()
		}
	})
	return c.err
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Dial connects to a raft peer and completes this side's handshake within
// timeout: a peer whose certificate this server does not trust fails the
// dial. A peer that refuses this server's certificate does not, under TLS
// 1.3: the client's handshake ends before the peer checks its certificate,
// so the refusal (the peer's alert) surfaces at the connection's first read.
// Like Accept's, the timeout is the handshake's context, not a deadline
// left on the connection raft then pools.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := l.dialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raft: dialling %s over TLS: %w", address, err)
	}
	conn := tls.Client(raw, l.store.ClientConfig())
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("raft: dialling %s over TLS: %w", address, err)
	}
	return conn, nil
}

// newTLSRaftTransport is raft's network transport over tlsStreamLayer.
func (s *Server) newTLSRaftTransport() (raft.Transport, error) {
	layer, err := NewTLSStreamLayer(s.cfg.RaftAddr, s.cfg.TLS)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithLogger(layer, 3, 10*time.Second, s.logger.Named("raft-net")), nil
}
