package tunnel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
)

// ErrNoServers is returned by Start when the client has no way to find a
// server.
var ErrNoServers = errcode.New(codes.InvalidArgument, "tunnel: no server list")

// ErrNoBackoff is returned by Start when the config has no reconnect
// policy.
var ErrNoBackoff = errcode.New(codes.InvalidArgument, "tunnel: no reconnect backoff")

// Backoff is the reconnect policy: the wait before the next attempt after
// failures consecutive attempts that established no session (0 after one
// that did). The wait is drawn from the upper half of it. The client role
// passes internal/backoff's Backoff; the tunnel declares only what it
// calls.
type Backoff interface {
	Delay(failures int) time.Duration
}

// ClientConfig configures the client side.
type ClientConfig struct {
	NodeID string
	// Servers returns server RPC addresses in the order to try them. It is
	// called before every attempt, so the tunnel follows the caller's
	// failover (the client role puts the server that answered it last
	// first).
	Servers func() []string
	// Conn returns a connection to a server (the client's rpc.Pool).
	Conn func(addr string) (*grpc.ClientConn, error)
	// Register registers the node's services (ClientRPC) on the gRPC
	// server of each new session.
	Register func(grpc.ServiceRegistrar)
	// Keepalive of the session; the server side has its own.
	Keepalive Keepalive
	// Backoff is the wait between attempts: it grows with each failed
	// attempt and starts again from its least once a session was
	// established. Required.
	Backoff Backoff
	Logger  hclog.Logger
}

// minSession is how long a session must have lived to count as
// established for the backoff.
const minSession = time.Second

// Client keeps a node's tunnel open to one of the servers.
type Client struct {
	cfg    ClientConfig
	logger hclog.Logger

	mu     sync.Mutex
	server string // the server of the current session, "" between sessions

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// Start begins keeping the tunnel open; Close stops it.
func Start(cfg ClientConfig) (*Client, error) {
	if cfg.NodeID == "" {
		return nil, ErrNoNodeID
	}
	if cfg.Servers == nil || cfg.Conn == nil {
		return nil, ErrNoServers
	}
	if cfg.Backoff == nil {
		return nil, ErrNoBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, logger: cfg.Logger.With("node_id", cfg.NodeID), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go c.run()
	return c, nil
}

// Server returns the server the tunnel is open to, "" while reconnecting.
func (c *Client) Server() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server
}

// Close closes the tunnel: calls in flight get a second to finish, then
// the session ends, and the server forgets it.
func (c *Client) Close() {
	c.cancel()
	<-c.done
}

func (c *Client) setServer(s string) {
	c.mu.Lock()
	c.server = s
	c.mu.Unlock()
}

func (c *Client) run() {
	defer close(c.done)
	// failures counts the consecutive attempts that established no session;
	// it picks the server to try and the wait before it.
	failures := 0
	for {
		servers := c.cfg.Servers()
		var (
			established bool
			err         = ErrNoServers
		)
		if len(servers) > 0 {
			server := servers[failures%len(servers)]
			start := time.Now()
			established, err = c.session(server)
			// A server that accepts and drops the tunnel at once (it is
			// shutting down) counts as a failure: the next attempt goes to
			// the next server, after a longer wait.
			established = established && time.Since(start) >= minSession
			if c.ctx.Err() != nil {
				return
			}
			err = fmt.Errorf("tunnel of node %s to server %s: %w", c.cfg.NodeID, server, err)
		}
		if established {
			// The session worked: the next attempt starts from the head
			// of the list again, with the shortest wait.
			failures = 0
		} else {
			failures++
		}
		// The wait is drawn from the upper half of the backoff, so nodes
		// that lost the same server spread their reconnects, and none
		// comes back sooner than half of it.
		d := c.cfg.Backoff.Delay(failures)
		wait := d/2 + rand.N(d/2+1)
		c.logger.Warn("tunnel closed; reconnecting", "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return
		}
	}
}

// errNotAccepted is returned when a server does not answer an Open in time.
var errNotAccepted = errors.New("the server did not accept the tunnel in time")

// session runs one session with server until it ends. established says
// whether the server accepted it.
func (c *Client) session(server string) (established bool, err error) {
	conn, err := c.cfg.Conn(server)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	md := metadata.Pairs(NodeIDHeader, c.cfg.NodeID, OpenedAtHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	stream, err := pb.NewTunnelClient(conn).Open(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		return false, err
	}
	// A server that takes the stream but never answers must not hold the
	// node: give up after a keepalive's time.
	ka := c.cfg.Keepalive.yamux(c.logger)
	accepted := time.AfterFunc(ka.ConnectionWriteTimeout, cancel)
	hdr, err := stream.Header()
	if !accepted.Stop() {
		return false, errNotAccepted
	}
	if err != nil {
		return false, err
	}
	if hdr == nil {
		// The stream ended without a header: the server refused the
		// tunnel (shutting down, or it serves no Tunnel), and Recv says
		// why.
		_, err := stream.Recv()
		return false, err
	}
	// Cancelling ends the stream on both sides (CloseSend would race
	// yamux's writer).
	sc := newStreamConn(stream, addr("node "+c.cfg.NodeID), addr(server), cancel)
	mux, err := yamux.Server(sc, ka)
	if err != nil {
		return false, err
	}
	go c.cfg.Keepalive.pingLoop(mux)
	srv := grpc.NewServer(rpc.ServerOptions()...)
	if c.cfg.Register != nil {
		c.cfg.Register(srv)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(mux) }()
	c.setServer(server)
	c.logger.Info("tunnel open", "server", server)

	select {
	case <-mux.CloseChan():
		err = errors.New("session closed")
		if ctx.Err() == nil {
			if e := stream.Context().Err(); e != nil {
				err = e
			}
		}
	case <-c.ctx.Done():
		err = c.ctx.Err()
	}
	c.setServer("")
	stopServer(srv, time.Second)
	_ = mux.Close()
	<-served
	return true, err
}

// stopServer stops srv gracefully, and at once after grace: a following
// log stream never ends by itself.
func stopServer(srv *grpc.Server, grace time.Duration) {
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(grace):
		srv.Stop()
		<-stopped
	}
}
