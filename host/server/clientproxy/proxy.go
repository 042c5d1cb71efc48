package clientproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// ErrNodeNotConnected is what NotConnectedError matches with errors.Is.
var ErrNodeNotConnected = errcode.New(codes.Unavailable, "node is not connected to any server")

// NotConnectedError is returned by the ClientProxy calls when no server
// holds a tunnel of the node: it is down, or between two tunnels (a retry
// may find it). Server is set when one server was asked (a forwarded call).
type NotConnectedError struct {
	NodeID string
	Server string
}

func (e *NotConnectedError) Error() string {
	if e.Server != "" {
		return fmt.Sprintf("node %s is not connected to server %s", e.NodeID, e.Server)
	}
	return fmt.Sprintf("node %s is not connected to any server", e.NodeID)
}

// Is makes errors.Is(err, ErrNodeNotConnected) true.
func (e *NotConnectedError) Is(target error) bool { return target == ErrNodeNotConnected }

// GRPCCode is Unavailable: the node may connect again.
func (e *NotConnectedError) GRPCCode() codes.Code { return codes.Unavailable }

// ErrNoAllocID is returned by the ClientProxy calls for a request without
// an alloc.
var ErrNoAllocID = errcode.New(codes.InvalidArgument, "request names no alloc (alloc_id)")

// ErrAllocNodeUnknown is returned when a request names no node and this
// server has no way to look up the alloc's node.
var ErrAllocNodeUnknown = errcode.New(codes.InvalidArgument, "request names no node (node_id) and this server cannot look up the alloc's node")

// AllocNodes finds the node an allocation was placed on; the state store's
// allocation table provides it (StateAllocs).
type AllocNodes interface {
	AllocNode(allocID string) (nodeID string, err error)
}

// Defaults of the proxy's deadlines and retries.
const (
	// proxyAttemptTimeout bounds one unary call to a node, and the time a
	// log stream may take to open.
	proxyAttemptTimeout = 10 * time.Second
	// proxyLogsTimeout bounds a log read that does not follow.
	proxyLogsTimeout = time.Minute
	// proxyLocateTimeout bounds asking the other servers for a node.
	proxyLocateTimeout = 2 * time.Second
	// Attempts is how many times a call is tried when it fails with a
	// retryable code (see retryable).
	Attempts     = 3
	proxyBackoff = 200 * time.Millisecond
)

// Config is what a Proxy needs of its server.
type Config struct {
	// ID and Name are the server's; ID marks the calls it forwards.
	ID, Name string
	Pool     *rpc.Pool
	// Tunnels holds the nodes' tunnels to this server.
	Tunnels *tunnel.Registry
	// Servers lists the servers in the local state, to ask for a node's
	// tunnel.
	Servers func() ([]*pb.ServerMember, error)
	// Allocs looks an alloc's node up; nil: requests must name the node.
	Allocs AllocNodes
	Logger hclog.Logger
	// Done ends when the server shuts down.
	Done context.Context
	// Go runs f in the background, counted for the server's shutdown.
	Go func(f func())
}

// Tunables are the proxy's deadlines and retries; zero fields take the
// defaults. Only tests change them.
type Tunables struct {
	AttemptTimeout, LogsTimeout, LocateTimeout, Backoff time.Duration
	// LostReleases makes this server's releases never arrive (tests of
	// lookups that must do without them).
	LostReleases bool
}

// Proxy is the ClientProxy service: API handlers call it on any server
// and it reaches the alloc's node over the node's tunnel, here or on the
// server that holds it.
type Proxy struct {
	pb.UnimplementedClientProxyServer
	cfg     Config
	tunnels *tunnel.Registry
	logger  hclog.Logger
	// allocs is nil until the state store can answer it; then a request
	// needs no node_id.
	allocs AllocNodes

	attemptTimeout, logsTimeout, locateTimeout, backoff time.Duration
	lostReleases                                        bool
}

// New returns the proxy of one server.
func New(cfg Config, t Tunables) *Proxy {
	def := func(d, or time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return or
	}
	return &Proxy{
		cfg: cfg, tunnels: cfg.Tunnels, logger: cfg.Logger, allocs: cfg.Allocs,
		attemptTimeout: def(t.AttemptTimeout, proxyAttemptTimeout), logsTimeout: def(t.LogsTimeout, proxyLogsTimeout),
		locateTimeout: def(t.LocateTimeout, proxyLocateTimeout), backoff: def(t.Backoff, proxyBackoff),
		lostReleases: t.LostReleases,
	}
}

// SetAllocs replaces the alloc lookup (nil: requests must name the node).
func (p *Proxy) SetAllocs(a AllocNodes) { p.allocs = a }

// Route is where a call to a node goes: its Session on this server, or the
// Server holding it.
type Route struct {
	Session *tunnel.Session
	Server  *pb.ServerMember
}

// NodeOf returns the node a request is for: the alloc's node when this
// server can look it up (a node_id that disagrees is refused), else the
// request's node_id.
func (p *Proxy) NodeOf(allocID, nodeID string) (string, error) {
	if allocID == "" {
		return "", ErrNoAllocID
	}
	if p.allocs == nil {
		if nodeID == "" {
			return "", fmt.Errorf("alloc %s: %w", allocID, ErrAllocNodeUnknown)
		}
		return nodeID, nil
	}
	placed, err := p.allocs.AllocNode(allocID)
	if errors.Is(err, fsm.ErrAllocNotFound) && nodeID != "" {
		// Not (yet) in this server's state — a follower behind the
		// leader, or an alloc already collected: the node named is asked,
		// and it refuses an alloc it does not hold.
		return nodeID, nil
	}
	if err != nil {
		return "", fmt.Errorf("alloc %s: %w", allocID, err)
	}
	if nodeID != "" && nodeID != placed {
		return "", fmt.Errorf("alloc %s runs on node %s, not on node %s: %w", allocID, placed, nodeID, errInvalidNode)
	}
	return placed, nil
}

// errInvalidNode is returned for a request whose node_id is not its
// alloc's node.
var errInvalidNode = errcode.New(codes.InvalidArgument, "wrong node for the alloc")

// Find returns where nodeID's tunnel is. A first attempt takes this
// server's own session when it has one; otherwise, and on a retry (the
// local session may be one the node has left for another server, not yet
// closed by its keepalive), it asks every server and the newest session
// wins. A request another server forwarded is answered from this server's
// tunnels only: that server already asked everyone.
func (p *Proxy) Find(ctx context.Context, nodeID string, retry bool) (Route, error) {
	local, ok := p.tunnels.Session(nodeID)
	if ok && !retry {
		return Route{Session: local}, nil
	}
	if rpc.Forwarded(ctx) {
		if ok {
			return Route{Session: local}, nil
		}
		return Route{}, &NotConnectedError{NodeID: nodeID, Server: p.cfg.Name}
	}
	m, at, err := p.locate(ctx, nodeID)
	if err != nil {
		return Route{}, err
	}
	switch {
	case ok && (m == nil || !at.After(local.OpenedAt())):
		return Route{Session: local}, nil
	case m != nil:
		return Route{Server: m}, nil
	}
	return Route{}, &NotConnectedError{NodeID: nodeID}
}

// retryable reports whether a failed attempt is worth another: the node or
// its server was unreachable (Unavailable: between two tunnels, a server
// going away) or did not answer within the attempt's deadline.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return errcode.Unreachable.Has(errcode.Code(err))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) bool {
	return backoff.Sleep(ctx.Done(), d)
}

// retryWait is the wait before try attempt+1 (attempt ≥ 1): the backoff
// doubled per earlier retry.
func (p *Proxy) retryWait(attempt int) time.Duration {
	return backoff.Backoff{Initial: p.backoff, Max: p.backoff << (Attempts - 1)}.Delay(attempt)
}

// RestartAlloc restarts an alloc's tasks on its node. Each attempt has a
// deadline; one that fails Unavailable or DeadlineExceeded is tried again
// (after finding the node again: it may have moved to another server).
func (p *Proxy) RestartAlloc(ctx context.Context, req *pb.RestartAllocRequest) (*pb.RestartAllocResponse, error) {
	nodeID, err := p.NodeOf(req.GetAllocId(), req.GetNodeId())
	if err != nil {
		return nil, err
	}
	req = proto.CloneOf(req)
	req.NodeId = nodeID
	var lastErr error
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.retryWait(attempt)) {
			break
		}
		var resp *pb.RestartAllocResponse
		resp, lastErr = p.restartOnce(ctx, nodeID, req, attempt > 0)
		if lastErr == nil {
			return resp, nil
		}
		if !retryable(ctx, lastErr) {
			return nil, lastErr
		}
		p.logger.Debug("restart of an alloc failed; retrying", "alloc_id", req.GetAllocId(), "node_id", nodeID, "attempt", attempt+1, "error", lastErr)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("restarting alloc %s on node %s: %w (last attempt: %v)", req.GetAllocId(), nodeID, ctx.Err(), lastErr)
	}
	return nil, lastErr
}

// attempts is how many times a call is tried: once when another server
// forwarded it (that server retries, after finding the node again), else
// Attempts.
func (p *Proxy) attempts(ctx context.Context) int {
	if rpc.Forwarded(ctx) {
		return 1
	}
	return Attempts
}

// forwardTimeout bounds an attempt forwarded to another server: longer than
// that server's own attempt, so its answer — which names the node — comes
// back before this server gives up.
func (p *Proxy) forwardTimeout() time.Duration {
	return p.attemptTimeout + max(p.attemptTimeout/4, 100*time.Millisecond)
}

func (p *Proxy) restartOnce(ctx context.Context, nodeID string, req *pb.RestartAllocRequest, retry bool) (*pb.RestartAllocResponse, error) {
	r, err := p.Find(ctx, nodeID, retry)
	if err != nil {
		return nil, err
	}
	if r.Session != nil {
		ctx, cancel := context.WithTimeout(ctx, p.attemptTimeout)
		defer cancel()
		return pb.NewClientRPCClient(r.Session.Conn()).RestartAlloc(ctx, req)
	}
	conn, err := p.cfg.Pool.Conn(r.Server.GetRpcAddr())
	if err != nil {
		return nil, viaServer(r.Server, nodeID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.forwardTimeout())
	defer cancel()
	resp, err := pb.NewClientProxyClient(conn).RestartAlloc(p.forwardContext(ctx), req)
	if err != nil {
		return nil, viaServer(r.Server, nodeID, err)
	}
	return resp, nil
}

// forwardContext marks a call to another server as forwarded: that server
// answers from its own tunnels only.
func (p *Proxy) forwardContext(ctx context.Context) context.Context {
	return rpc.MarkForwarded(ctx, p.cfg.ID)
}

// viaServer says which node and server a forwarded call was for, keeping
// the code.
func viaServer(m *pb.ServerMember, nodeID string, err error) error {
	return errcode.Status(fmt.Errorf("node %s via server %s: %w", nodeID, m.GetName(), err))
}

// Logs streams a task's log from its node. Its first frame is empty and
// says the node accepted the request. The stream's opening (until the node
// accepts it) has a deadline and is retried like a unary call, and is
// retried as long as no data was relayed yet — a repeated request then
// sends nothing twice. A read that does not follow has a deadline for the
// whole stream; a following one lives as long as its caller, the node's
// tunnel (whose keepalive ends a dead one) and this server.
func (p *Proxy) Logs(req *pb.LogsRequest, stream grpc.ServerStreamingServer[pb.LogsFrame]) error {
	err := p.logs(req, stream)
	if err != nil && err != io.EOF {
		return errcode.Status(err)
	}
	return nil
}

func (p *Proxy) logs(req *pb.LogsRequest, out grpc.ServerStreamingServer[pb.LogsFrame]) error {
	nodeID, err := p.NodeOf(req.GetAllocId(), req.GetNodeId())
	if err != nil {
		return err
	}
	req = proto.CloneOf(req)
	req.NodeId = nodeID
	ctx, cancel := context.WithCancel(out.Context())
	defer cancel()
	stop := context.AfterFunc(p.cfg.Done, cancel)
	defer stop()
	if !req.GetFollow() {
		ctx, cancel = context.WithTimeout(ctx, p.logsTimeout)
		defer cancel()
	}

	var (
		lastErr error
		opened  bool
	)
	for attempt := range p.attempts(ctx) {
		if attempt > 0 && !sleep(ctx, p.retryWait(attempt)) {
			break
		}
		relayed, err := p.logsOnce(ctx, nodeID, req, out, &opened, attempt > 0)
		if p.cfg.Done.Err() != nil && out.Context().Err() == nil {
			return fmt.Errorf("logs of alloc %s on node %s: server %s is shutting down: %w", req.GetAllocId(), nodeID, p.cfg.Name, errServerShutdown)
		}
		if err == nil || relayed > 0 || !retryable(ctx, err) {
			return err
		}
		lastErr = err
		p.logger.Debug("log stream failed before any data; retrying", "alloc_id", req.GetAllocId(), "node_id", nodeID, "attempt", attempt+1, "error", err)
	}
	if ctx.Err() != nil && out.Context().Err() == nil {
		return fmt.Errorf("logs of alloc %s on node %s: %w (last attempt: %v)", req.GetAllocId(), nodeID, ctx.Err(), lastErr)
	}
	return lastErr
}

var errServerShutdown = errcode.New(codes.Unavailable, "server shutting down")

// logsOnce opens one stream to the node (or its server) and relays it,
// returning how many frames it relayed.
func (p *Proxy) logsOnce(ctx context.Context, nodeID string, req *pb.LogsRequest, out grpc.ServerStreamingServer[pb.LogsFrame], opened *bool, retry bool) (int, error) {
	r, err := p.Find(ctx, nodeID, retry)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var in grpc.ServerStreamingClient[pb.LogsFrame]
	if r.Session != nil {
		in, err = pb.NewClientRPCClient(r.Session.Conn()).Logs(ctx, req)
	} else {
		var conn *grpc.ClientConn
		if conn, err = p.cfg.Pool.Conn(r.Server.GetRpcAddr()); err == nil {
			in, err = pb.NewClientProxyClient(conn).Logs(p.forwardContext(ctx), req)
		}
	}
	via := func(err error) error {
		if r.Server != nil && err != nil && err != io.EOF {
			return viaServer(r.Server, nodeID, err)
		}
		return err
	}
	if err != nil {
		return 0, via(err)
	}
	// Opening has a deadline: the node (and a forwarding server) send the
	// stream's header as soon as the request is accepted.
	openTimeout := p.attemptTimeout
	if r.Server != nil {
		openTimeout = p.forwardTimeout()
	}
	openTimer := time.AfterFunc(openTimeout, cancel)
	md, err := in.Header()
	if !openTimer.Stop() {
		return 0, via(fmt.Errorf("logs of alloc %s: node %s did not open the stream within %s: %w", req.GetAllocId(), nodeID, openTimeout, context.DeadlineExceeded))
	}
	if err != nil {
		return 0, via(err)
	}
	if md == nil {
		// The stream ended without a header: a refusal (unknown alloc or
		// task), whose status Recv returns.
		_, err := in.Recv()
		return 0, via(err)
	}
	// The caller learns the stream is open before any data: ClientProxy's
	// first frame is empty (jobs_rpc.proto), so an API handler knows of a
	// refusal before it starts answering with the log.
	if !*opened {
		if err := out.Send(&pb.LogsFrame{}); err != nil {
			return 0, err
		}
		*opened = true
	}
	relayed := 0
	for {
		f, err := in.Recv()
		if err != nil {
			return relayed, via(err)
		}
		if len(f.GetData()) == 0 {
			continue // a forwarding server's own "open" frame
		}
		if err := out.Send(f); err != nil {
			return relayed, err
		}
		relayed++
	}
}

// StateAllocs looks allocs up in a server's state store (the production
// lookup).
type StateAllocs func() *fsm.StateStore

// AllocNode returns the node alloc allocID was placed on.
func (st StateAllocs) AllocNode(allocID string) (string, error) {
	a, err := st().AllocByID(nil, allocID)
	if err != nil {
		return "", err
	}
	if a == nil {
		return "", fsm.ErrAllocNotFound
	}
	return a.GetNodeId(), nil
}
