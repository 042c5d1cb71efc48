package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrRegistryClosed is returned to a client that opens a tunnel to a server
// that is shutting down; the client moves on to another server.
var ErrRegistryClosed = errcode.New(codes.Unavailable, "tunnel: the server is shutting down")

// ErrNoNodeID is returned to an Open stream whose metadata names no node.
var ErrNoNodeID = errcode.New(codes.InvalidArgument, "tunnel: the stream names no node (metadata "+NodeIDHeader+")")

// RegistryConfig configures the server side.
type RegistryConfig struct {
	// Name names this server in logs and in the tunnel's local address.
	Name      string
	Keepalive Keepalive
	Logger    hclog.Logger
	// Now is the clock of Session.ConnectedAt (time.Now when nil).
	Now func() time.Time
	// OnOpen, when set, is called with every session the registry accepts
	// (after it replaced the node's older one here); a server uses it to
	// have the other servers close their older tunnels of the node.
	OnOpen func(*Session)
}

// Registry is the Tunnel service of a server: it accepts nodes' tunnels
// and keeps the newest session of each node.
type Registry struct {
	pb.UnimplementedTunnelServer
	cfg RegistryConfig

	mu       sync.Mutex
	sessions map[string]*Session
	closed   bool
	// changed is closed and replaced whenever a session is added or
	// removed, so a caller can wait for a node without polling.
	changed chan struct{}
	// wg counts the Open handlers, so Close returns after every one ended.
	wg sync.WaitGroup
}

var _ pb.TunnelServer = (*Registry)(nil)

// NewRegistry returns an empty registry; register it on the server's gRPC
// server with pb.RegisterTunnelServer.
func NewRegistry(cfg RegistryConfig) *Registry {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Registry{cfg: cfg, sessions: make(map[string]*Session), changed: make(chan struct{})}
}

// Session is one node's tunnel to this server.
type Session struct {
	nodeID      string
	connectedAt time.Time
	openedAt    time.Time
	remote      net.Addr
	mux         *yamux.Session
	conn        *grpc.ClientConn
	closeOnce   sync.Once
}

// NodeID returns the node the session belongs to.
func (s *Session) NodeID() string { return s.nodeID }

// ConnectedAt returns when the server accepted the session.
func (s *Session) ConnectedAt() time.Time { return s.connectedAt }

// OpenedAt returns when the node opened the session, by the node's clock
// (ConnectedAt for a node that did not say): it orders a node's sessions
// across servers.
func (s *Session) OpenedAt() time.Time { return s.openedAt }

// Conn returns the connection to the node's services (ClientRPC). Errors of
// its calls name the node and keep their codes; a call on a session that has
// closed fails with Unavailable.
func (s *Session) Conn() *grpc.ClientConn { return s.conn }

// Done is closed once the session has closed.
func (s *Session) Done() <-chan struct{} { return s.mux.CloseChan() }

// Close closes the session; the node's client then opens a new one.
func (s *Session) Close() {
	// The session first, so calls cut off by it see it closed (see
	// callError).
	s.closeOnce.Do(func() {
		_ = s.mux.Close()
		_ = s.conn.Close()
	})
}

// Session returns the node's current session.
func (r *Registry) Session(nodeID string) (*Session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sessions[nodeID]
	return s, ok
}

// Wait returns the node's session, waiting for the node to connect until
// ctx ends (then it returns ctx's error).
func (r *Registry) Wait(ctx context.Context, nodeID string) (*Session, error) {
	for {
		r.mu.Lock()
		s, ok := r.sessions[nodeID]
		changed := r.changed
		r.mu.Unlock()
		if ok {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// CloseOlder closes the node's session if the node opened it before
// openedAt (by its clock), reporting whether it did: the node has opened a
// newer one elsewhere.
func (r *Registry) CloseOlder(nodeID string, openedAt time.Time) bool {
	r.mu.Lock()
	s, ok := r.sessions[nodeID]
	if ok && s.openedAt.Before(openedAt) {
		delete(r.sessions, nodeID)
		r.notifyLocked()
	} else {
		ok = false
	}
	r.mu.Unlock()
	if ok {
		r.cfg.Logger.Info("node opened a newer tunnel to another server; closing this one", "node_id", nodeID, "remote", s.remote)
		s.Close()
	}
	return ok
}

// Nodes returns the IDs of the connected nodes.
func (r *Registry) Nodes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.sessions))
	for id := range r.sessions {
		out = append(out, id)
	}
	return out
}

// Close closes every session and refuses new ones, and returns once every
// Open handler has ended (so a graceful gRPC stop does not wait on them).
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	sessions := r.sessions
	r.sessions = make(map[string]*Session)
	r.notifyLocked()
	r.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	r.wg.Wait()
}

func (r *Registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// add makes s the node's session and returns the one it replaced.
func (r *Registry) add(s *Session) (old *Session, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrRegistryClosed
	}
	old = r.sessions[s.nodeID]
	r.sessions[s.nodeID] = s
	r.notifyLocked()
	return old, nil
}

// remove forgets s unless a newer session of its node replaced it.
func (r *Registry) remove(s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[s.nodeID] == s {
		delete(r.sessions, s.nodeID)
		r.notifyLocked()
	}
}

// Open serves one node's tunnel for as long as the session lives.
func (r *Registry) Open(stream pb.Tunnel_OpenServer) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return errcode.Status(ErrRegistryClosed)
	}
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()

	ctx := stream.Context()
	md, _ := metadata.FromIncomingContext(ctx)
	var nodeID string
	if v := md.Get(NodeIDHeader); len(v) > 0 {
		nodeID = v[0]
	}
	if nodeID == "" {
		return errcode.Status(ErrNoNodeID)
	}
	connectedAt := r.cfg.Now()
	openedAt := connectedAt
	if v := md.Get(OpenedAtHeader); len(v) > 0 {
		ns, err := strconv.ParseInt(v[0], 10, 64)
		if err != nil || ns <= 0 {
			return status.Errorf(codes.InvalidArgument, "tunnel of node %s: %s %q is not unix nanoseconds", nodeID, OpenedAtHeader, v[0])
		}
		openedAt = time.Unix(0, ns)
	}
	var remote net.Addr = addr("node " + nodeID)
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr
	}
	// The header tells the client its tunnel is accepted. It is sent before
	// the yamux session starts, which then is the stream's only sender.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}

	done := make(chan struct{})
	conn := newStreamConn(stream, addr("server "+r.cfg.Name), remote, func() { close(done) })
	logger := r.cfg.Logger.With("node_id", nodeID)
	mux, err := yamux.Client(conn, r.cfg.Keepalive.yamux(logger))
	if err != nil {
		return status.Errorf(codes.Internal, "tunnel of node %s: %v", nodeID, err)
	}
	go r.cfg.Keepalive.pingLoop(mux)
	s := &Session{nodeID: nodeID, connectedAt: connectedAt, openedAt: openedAt, remote: remote, mux: mux}
	s.conn, err = grpc.NewClient("passthrough:///"+nodeID, append(dialOptions(),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return mux.Open() }),
		grpc.WithChainUnaryInterceptor(s.unaryInterceptor),
		grpc.WithChainStreamInterceptor(s.streamInterceptor),
	)...)
	if err != nil {
		_ = mux.Close()
		return status.Errorf(codes.Internal, "tunnel of node %s: %v", nodeID, err)
	}
	old, err := r.add(s)
	if err != nil {
		s.Close()
		return errcode.Status(err)
	}
	if old != nil {
		// Newest wins: the node opened this tunnel because it no longer
		// uses the old one (or it is another process with the same ID,
		// which only the newest can be).
		logger.Info("node opened a new tunnel; closing the old one", "old_remote", old.remote, "remote", remote)
		old.Close()
	}
	logger.Debug("node tunnel open", "remote", remote)
	if r.cfg.OnOpen != nil {
		r.cfg.OnOpen(s)
	}

	select {
	case <-mux.CloseChan():
	case <-done:
	case <-ctx.Done():
	}
	r.remove(s)
	s.Close()
	logger.Debug("node tunnel closed", "remote", remote)
	return nil
}

// ErrSessionClosed is returned by a call made on a session that has closed
// (the node reconnected, or its tunnel broke): ask the registry again.
var ErrSessionClosed = errcode.New(codes.Unavailable, "tunnel session closed")

// callError is the error a call on s leaves with: the node's name first,
// its code kept — except that a call cut off because the session closed
// (gRPC says Canceled when its connection closes under a call) is
// ErrSessionClosed, Unavailable, since the caller cancelled nothing and
// retrying on the node's new session helps.
func (s *Session) callError(ctx context.Context, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	if s.mux.IsClosed() && ctx.Err() == nil && status.Code(err) != codes.Unavailable {
		err = ErrSessionClosed
	}
	return nameNode(s.nodeID, err)
}

// nameNode puts the node's name in err's message and keeps its code and
// details, so every failed call to a node says which node.
func nameNode(nodeID string, err error) error {
	st := status.Convert(errcode.Status(err))
	p := st.Proto()
	p.Message = fmt.Sprintf("node %s: %s", nodeID, p.Message)
	return status.FromProto(p).Err()
}

func (s *Session) unaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if s.mux.IsClosed() {
		return nameNode(s.nodeID, ErrSessionClosed)
	}
	return s.callError(ctx, invoker(ctx, method, req, reply, cc, opts...))
}

func (s *Session) streamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if s.mux.IsClosed() {
		return nil, nameNode(s.nodeID, ErrSessionClosed)
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, s.callError(ctx, err)
	}
	return &namedStream{ClientStream: cs, s: s, ctx: ctx}, nil
}

// namedStream names the node in the errors of a stream's calls.
type namedStream struct {
	grpc.ClientStream
	s   *Session
	ctx context.Context
}

func (n *namedStream) Header() (metadata.MD, error) {
	md, err := n.ClientStream.Header()
	return md, n.s.callError(n.ctx, err)
}

func (n *namedStream) SendMsg(m any) error { return n.s.callError(n.ctx, n.ClientStream.SendMsg(m)) }
func (n *namedStream) RecvMsg(m any) error { return n.s.callError(n.ctx, n.ClientStream.RecvMsg(m)) }
func (n *namedStream) CloseSend() error    { return n.s.callError(n.ctx, n.ClientStream.CloseSend()) }
