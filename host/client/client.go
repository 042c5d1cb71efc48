package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"berth.dev/berth/csi/pluginmanager"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/host/client/allocrunner"
	"berth.dev/berth/host/client/hostvolumes"
	"berth.dev/berth/internal/backoff"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/errcode"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// Config configures the client role.
type Config struct {
	// DataDir holds the node ID and (later) the client state DB.
	DataDir  string
	NodeName string
	// Servers are server RPC addresses to register with.
	Servers  []string
	HTTPAddr string
	Logger   hclog.Logger
	// Drivers, when set, reports the node's task drivers for registration.
	Drivers func() map[string]*pb.DriverInfo
	// DriversChanged, when set, receives a value whenever what Drivers
	// reports changed; the client then registers the node again.
	DriversChanged <-chan struct{}
	// Meta is the node's operator metadata (agent config client.meta),
	// for constraints (${meta.<key>}).
	Meta map[string]string
	// ReservedCPUMHz and ReservedMemoryMB are kept back from the scheduler
	// for the agent and the system.
	ReservedCPUMHz   int64
	ReservedMemoryMB int64

	// TaskDrivers and State, both set, make the client run allocs:
	// TaskDrivers runs their tasks (ManagerDrivers of the agent's driver
	// manager) and State is the client state DB, from which a restarted
	// client recovers its allocs.
	TaskDrivers allocrunner.Drivers
	State       AllocStore
	// Hooks are added to every alloc runner (volume hook, CSI plugin
	// supervisor).
	Hooks allocrunner.Hooks

	// CSIRegistry is the node's dynamic CSI plugin registry (the one the
	// csi_plugin supervisor hook registers in), persisted in State. The
	// client restores it after building its alloc runners and before
	// running them.
	CSIRegistry *registry.Registry
	// CSIAdapters are the node's storage adapters
	// (the agent adapts its adapters.Manager to it).
	CSIAdapters pluginmanager.AdapterSource
	// CSIRefreshInterval spaces the plugin manager's fingerprints of a
	// healthy plugin; zero means its default (30s).
	CSIRefreshInterval time.Duration
	// WatchMaxWait overrides WatchMaxWait (tests).
	WatchMaxWait time.Duration
	// TLS, when set, makes the client's connections to the servers (and
	// so its tunnel) mutual TLS with the client's certificate.
	TLS *tlsconf.Store

	// HostVolumes are the node's static host volumes by name (agent
	// config host_volume blocks, checked to exist), fingerprinted to the
	// servers and given to tasks that mount them (host_volumes.go).
	HostVolumes map[string]*pb.HostVolumeInfo
	// HostVolumesDir is where the built-in mkdir plugin makes dynamic
	// host volumes (empty: <DataDir>/host_volumes); HostVolumePluginDir
	// holds external host volume plugins (empty: none).
	HostVolumesDir      string
	HostVolumePluginDir string
	// Identity keeps the node secret (the state DB); nil keeps it in
	// memory only (node_identity.go).
	Identity NodeSecretStore

	// DialOptions are added to the options of the client's connections to
	// the servers (after TLS and the node secret): the node simulator
	// (bench/nodesim) counts the calls with an interceptor.
	DialOptions []grpc.DialOption

	// Tests only (tunnel.go): the alloc side ClientRPC serves, the log
	// reader's poll and the tunnel's keepalive.
	allocAccess     allocAccess
	logOptions      logOptions
	tunnelKeepalive tunnel.Keepalive
}

// Client is a running client role.
type Client struct {
	cfg    Config
	logger hclog.Logger
	nodeID string
	pool   *rpc.Pool

	mu         sync.Mutex
	servers    []string
	next       int
	registered bool
	// registeredCh is closed (and replaced) when registered turns true.
	registeredCh chan struct{}
	// changes counts fingerprint changes (drivers, node info); sent is
	// the count the last accepted registration was built after. While they
	// differ the servers hold an older fingerprint and the next step
	// registers again; the node stays registered meanwhile. A change during
	// a registration is not lost: that registration records the count it
	// started from.
	changes, sent uint64
	// registeredNode is the node the last accepted registration sent:
	// what the servers schedule against, and what alloc runners take
	// their node attributes from (the host is not fingerprinted again for
	// every alloc; a change is re-registered and then taken).
	registeredNode *pb.Node
	ttl            time.Duration
	// lastOK is the server and time of the last call that succeeded: the
	// servers mark the node down a TTL after it (see attemptTimeout).
	lastOK contact
	// updateCh asks the loop to re-register (a fingerprint changed).
	updateCh chan struct{}
	// tunnel is the node's connection for the servers' calls (tunnel.go).
	tunnel *tunnel.Client
	// allocs runs the node's allocs; nil unless allocsEnabled.
	allocs *allocRuntime
	// watching is the alloc watch's attempt under way.
	watching watchAttempt
	// plugins is the CSI plugin manager; nil without CSI plugins.
	plugins *pluginmanager.Manager
	// volumes is the node's CSI volume machinery (volumes.go); nil
	// without CSI plugins or allocs.
	volumes *volumeRuntime
	// forgotten is set when the servers answered a heartbeat with
	// NotFound: the registration that follows creates the node anew,
	// without the CSI plugins it had, so they are sent again.
	forgotten bool
	// dynamicVolumes are the node's dynamic host volumes
	// (host_volumes.go).
	dynamicVolumes *hostvolumes.Manager
	// secret is the node secret the servers issued (node_identity.go).
	secret atomic.Pointer[string]

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// watchAttempt is the server an alloc watch attempt waits on.
type watchAttempt struct {
	server string
	cancel context.CancelFunc
}

// contact is a server that answered and when.
type contact struct {
	server string
	at     time.Time
}

// ErrNoServers is returned by New when the client has no server to talk to.
var ErrNoServers = errcode.New(codes.FailedPrecondition, "client: no servers configured")

// New loads the node identity and starts registering and heartbeating.
func New(cfg Config) (*Client, error) {
	if len(cfg.Servers) == 0 {
		return nil, ErrNoServers
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	id, err := loadNodeID(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:      cfg,
		logger:   cfg.Logger,
		nodeID:   id,
		servers:  shuffled(cfg.Servers),
		updateCh: make(chan struct{}, 1),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),

		registeredCh: make(chan struct{}),
	}
	opts := append(tlsconf.DialOptions(cfg.TLS), rpc.NodeSecretDialOptions(c.nodeSecret)...)
	c.pool = rpc.NewPool(append(opts, cfg.DialOptions...)...)
	if err := c.loadNodeSecret(); err != nil {
		cancel()
		c.pool.Close()
		return nil, err
	}
	// The plugin manager and the volume hooks exist before the alloc
	// runners are built (the runners get the hooks); the manager starts
	// once the registry is restored.
	if err := c.newCSIPlugins(); err != nil {
		cancel()
		return nil, err
	}
	if err := c.newDynamicVolumes(); err != nil {
		cancel()
		return nil, err
	}
	if c.allocsEnabled() {
		if err := c.newVolumes(); err != nil {
			cancel()
			return nil, err
		}
		c.addHostVolumeHook()
		c.startAllocs()
	} else {
		c.restoreCSIRegistry()
	}
	c.startCSIPlugins()
	if err := c.startTunnel(); err != nil {
		cancel()
		c.stopCSIPlugins()
		c.stopAllocs()
		c.stopVolumes()
		return nil, err
	}
	go c.run()
	c.logger.Info("client started", "node_id", id, "servers", cfg.Servers)
	return c, nil
}

// shuffled returns the servers in random order, so the clients of a
// cluster spread over its servers instead of all starting on the first.
func shuffled(servers []string) []string {
	out := slices.Clone(servers)
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// NodeID returns this node's persistent ID.
func (c *Client) NodeID() string { return c.nodeID }

// Registered reports whether the servers accepted this node's registration.
func (c *Client) Registered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registered
}

// UpdateNode asks the client to re-register with a fresh fingerprint.
func (c *Client) UpdateNode() {
	select {
	case c.updateCh <- struct{}{}:
	default:
	}
}

// Shutdown stops heartbeating and supervising allocs; their tasks keep
// running for the next start to recover. The node stays registered; the
// leader marks it down when its TTL passes.
func (c *Client) Shutdown() {
	c.cancel()
	<-c.done
	c.stopCSIPlugins()
	c.stopAllocs()
	c.stopVolumes()
	c.tunnel.Close()
	c.pool.Close()
}

func (c *Client) node() *pb.Node {
	name := c.cfg.NodeName
	fp := hostFingerprint()
	if name == "" {
		name = fp.GetHostname()
	}
	n := &pb.Node{Id: c.nodeID, Name: name, Fingerprint: fp, HttpAddr: c.cfg.HTTPAddr,
		Resources: nodeResources(fp, c.cfg.ReservedCPUMHz, c.cfg.ReservedMemoryMB), Meta: maps.Clone(c.cfg.Meta),
		HostVolumes: c.hostVolumeInfos()}
	if c.cfg.Drivers != nil {
		n.Drivers = c.cfg.Drivers()
	}
	return n
}

const (
	minRetry = 250 * time.Millisecond
	maxRetry = 15 * time.Second
)

// serverRetry spaces the client's tries of a call the servers did not
// answer (registration and heartbeats, the alloc watch, status updates).
var serverRetry = backoff.Backoff{Initial: minRetry, Max: maxRetry}

func (c *Client) run() {
	defer close(c.done)
	failures := 0 // consecutive failed steps
	for {
		wait, err := c.step()
		if err != nil {
			failures++
			wait = serverRetry.Delay(failures)
			c.logger.Warn("contacting servers", "error", err, "retry_in", wait)
		} else {
			failures = 0
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.updateCh:
			c.markStale()
		case <-c.cfg.DriversChanged:
			c.markStale()
		case <-time.After(wait):
		}
	}
}

// step registers (when not yet registered) or heartbeats once, returning how
// long to wait before the next step.
func (c *Client) step() (time.Duration, error) {
	c.mu.Lock()
	register, changes := !c.registered || c.sent != c.changes, c.changes
	c.mu.Unlock()
	if register {
		var resp *pb.NodeRegisterResponse
		node := c.node()
		err := c.call(func(ctx context.Context, nodes pb.NodesClient) (err error) {
			resp, err = nodes.Register(ctx, &pb.NodeRegisterRequest{Node: node})
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("registering node %s: %w", c.nodeID, err)
		}
		c.keepNodeSecret(resp.GetNodeSecret())
		if resp.GetHostVolumesKnown() && c.dynamicVolumes != nil {
			c.dynamicVolumes.Retain(resp.GetHostVolumeIds())
		}
		c.learn(resp.GetServers(), resp.GetHeartbeatTtlMs())
		c.setRegistered(true)
		c.mu.Lock()
		c.sent = changes
		c.registeredNode = node
		forgotten := c.forgotten
		c.forgotten = false
		c.mu.Unlock()
		c.reportAllocs()
		if forgotten && c.plugins != nil {
			c.plugins.Resend()
		}
		c.logger.Info("node registered", "node_id", c.nodeID, "index", resp.GetMeta().GetIndex())
		return c.interval(), nil
	}
	var resp *pb.NodeHeartbeatResponse
	err := c.call(func(ctx context.Context, nodes pb.NodesClient) (err error) {
		resp, err = nodes.Heartbeat(ctx, &pb.NodeHeartbeatRequest{NodeId: c.nodeID})
		return err
	})
	if status.Code(err) == codes.NotFound {
		// The servers forgot the node (a snapshot restore, a deregister):
		// register again at once.
		c.logger.Warn("servers do not know this node; registering again", "node_id", c.nodeID)
		c.mu.Lock()
		c.forgotten = true
		c.mu.Unlock()
		c.setRegistered(false)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("heartbeat of node %s: %w", c.nodeID, err)
	}
	c.learn(resp.GetServers(), resp.GetHeartbeatTtlMs())
	if resp.GetRegisterAgain() {
		// The servers admit node secrets now and this node has none
		// (node_identity.go): its next registration has its secret
		// admitted.
		c.logger.Info("servers ask this node to register again to have its node secret admitted", "node_id", c.nodeID)
		c.setRegistered(false)
		return 0, nil
	}
	return c.interval(), nil
}

func (c *Client) setRegistered(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v && !c.registered {
		close(c.registeredCh)
		c.registeredCh = make(chan struct{})
	}
	c.registered = v
}

// markStale asks the next step to register again with a fresh fingerprint,
// without saying the node is unregistered: it still is, with the old one.
func (c *Client) markStale() {
	c.mu.Lock()
	c.changes++
	c.mu.Unlock()
}

// defaultTTL stands in for the heartbeat TTL until a server has told us
// its own (the servers' default).
const defaultTTL = 10 * time.Second

func (c *Client) currentTTL() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ttl <= 0 {
		return defaultTTL
	}
	return c.ttl
}

// interval is a third of the TTL with jitter, so two heartbeats may be lost
// before the node is marked down.
func (c *Client) interval() time.Duration {
	base := c.currentTTL() / 3
	return base - time.Duration(rand.Int64N(int64(base/4)+1))
}

// attemptTimeout bounds one attempt of a call that has left servers to
// try, this one included. Once a heartbeat has been acknowledged, the
// servers mark the node down a TTL after it: the time left until then,
// less a tenth of the TTL kept for the leader to handle the last attempt,
// is split over the servers left, so servers that silently drop packets
// cost their share and the last one still answers in time (a fixed
// timeout as long as the TTL let one silent server flap a healthy node to
// down). A share is never under attemptFloor, so a node already late
// still gives each server a fair chance. Before any acknowledgement
// (registration) there is no deadline to protect, and an attempt gets a
// third of the TTL.
func (c *Client) attemptTimeout(left int) time.Duration {
	ttl := c.currentTTL()
	c.mu.Lock()
	last := c.lastOK.at
	c.mu.Unlock()
	if last.IsZero() {
		return ttl / 3
	}
	budget := ttl - ttl/10 - time.Since(last)
	return max(attemptFloor(ttl), budget/time.Duration(max(left, 1)))
}

// attemptFloor is the shortest attempt: a tenth of the TTL, and at most a
// second, which a live server answers a heartbeat in with room to spare.
func attemptFloor(ttl time.Duration) time.Duration { return min(time.Second, ttl/10) }

// learn adds the servers a server told us about and records the TTL.
func (c *Client) learn(servers []string, ttlMs int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ttlMs > 0 {
		c.ttl = time.Duration(ttlMs) * time.Millisecond
	}
	var learned []string
	for _, s := range servers {
		if !slices.Contains(c.servers, s) && !slices.Contains(learned, s) {
			learned = append(learned, s)
		}
	}
	// Every server reports the same list: shuffled, so clients configured
	// with one seed address do not all fail over in the same order.
	c.servers = append(c.servers, shuffled(learned)...)
}

// refusal reports whether a call's error is the cluster's answer, the same
// from every server: the request itself was refused. Any other error —
// no answer in time, a server that cannot serve now, or one that failed
// in a way it did not explain (Internal, Unknown) — says something about
// that server, so the call tries the next one.
func refusal(code codes.Code) bool { return errcode.Refusal.Has(code) }

// call runs fn against the servers in turn, starting with the one that
// answered last, until one answers or refuses the request (see refusal);
// each attempt is bounded by attemptTimeout. When none answers, the next
// call starts one server further, so a server that black-holes every call
// is not always tried first.
func (c *Client) call(fn func(context.Context, pb.NodesClient) error) error {
	return c.callConn(c.attemptTimeout, func(ctx context.Context, conn grpc.ClientConnInterface) error {
		return fn(ctx, pb.NewNodesClient(conn))
	})
}

// callConn is call for any service, with attempt timeouts from timeout
// (given how many servers are left to try, this one included).
func (c *Client) callConn(timeout func(left int) time.Duration, fn func(context.Context, grpc.ClientConnInterface) error) error {
	return c.callConnOn(timeout, false, fn)
}

// callConnOn is callConn; with watch set the call is the alloc watch,
// whose attempt another call's failure at the same server cancels (see
// watching).
func (c *Client) callConnOn(timeout func(left int) time.Duration, watch bool, fn func(context.Context, grpc.ClientConnInterface) error) error {
	return c.callConnIn(c.ctx, timeout, watch, fn)
}

// callConnCtx is callConn for a caller with a context of its own (a hook
// waiting on a claim): its attempts end with it too, and its ending is
// the caller's doing, not a server's failure, so it neither moves the
// alloc watch off the server nor tries the next one.
func (c *Client) callConnCtx(caller context.Context, timeout func(left int) time.Duration, fn func(context.Context, grpc.ClientConnInterface) error) error {
	both, stop := bothContexts(c.ctx, caller)
	defer stop()
	return c.callConnIn(both, timeout, false, fn)
}

// callConnIn runs the attempts under caller, which is c.ctx or ends with
// it (callConnCtx).
func (c *Client) callConnIn(caller context.Context, timeout func(left int) time.Duration, watch bool, fn func(context.Context, grpc.ClientConnInterface) error) error {
	c.mu.Lock()
	servers := slices.Clone(c.servers)
	start := c.next
	c.mu.Unlock()
	var errs []error
	for i := range servers {
		idx := (start + i) % len(servers)
		conn, err := c.pool.Conn(servers[idx])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		timeout := timeout(len(servers) - i)
		ctx, cancel := context.WithTimeout(caller, timeout)
		if watch {
			c.setWatching(servers[idx], cancel)
		}
		err = fn(ctx, conn)
		if watch {
			c.setWatching("", nil)
		}
		cancel()
		code := status.Code(err)
		// The caller's own end (not the client's): no server failed.
		callerDone := caller.Err() != nil && c.ctx.Err() == nil
		if code != codes.OK && !refusal(code) && !watch && !callerDone {
			c.suspect(servers[idx])
		}
		switch {
		case code == codes.OK:
			c.mu.Lock()
			c.next = idx
			c.lastOK = contact{server: servers[idx], at: time.Now()}
			c.mu.Unlock()
			return nil
		case refusal(code):
			c.mu.Lock()
			c.next = idx
			c.mu.Unlock()
			return fmt.Errorf("server %s: %w", servers[idx], err)
		case c.ctx.Err() != nil:
			return c.ctx.Err()
		case callerDone:
			return fmt.Errorf("server %s: %w", servers[idx], caller.Err())
		}
		errs = append(errs, fmt.Errorf("server %s (attempt timeout %s): %w", servers[idx], timeout, err))
	}
	c.mu.Lock()
	c.next = (start + 1) % max(len(c.servers), 1)
	c.mu.Unlock()
	return errors.Join(errs...)
}

// setWatching records the server the alloc watch waits on and how to
// cancel that attempt.
func (c *Client) setWatching(server string, cancel context.CancelFunc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watching = watchAttempt{server: server, cancel: cancel}
}

// suspect is told that a call to server failed for want of an answer: a
// watch blocked on that server is cancelled, so it moves on now rather
// than when its max_wait (minutes) runs out — a blocking query cannot
// tell a silent server from one with nothing to say.
func (c *Client) suspect(server string) {
	c.mu.Lock()
	w := c.watching
	c.mu.Unlock()
	if w.server == server && w.cancel != nil {
		c.logger.Warn("a call to the server the alloc watch waits on failed; moving the watch on", "server", server)
		w.cancel()
	}
}

// lastContact returns the server that last answered and when.
func (c *Client) lastContact() contact {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastOK
}
