package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/authz"
	"berth.dev/berth/host/server/clientproxy"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/host/server/nodes"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/atomicfile"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/internal/uuid"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/rpc/tunnel"
)

// Server is one raft voter with its RPC endpoints and leader loops.
type Server struct {
	cfg    *Config
	opts   options
	id     string
	logger hclog.Logger

	fsm       *fsm.FSM
	raft      *raft.Raft
	transport raft.Transport
	logs      raft.LogStore
	stores    []interface{ Close() error }
	// hadState is true when raft found existing state at start: this server
	// was bootstrapped or joined before and must never bootstrap again.
	hadState bool

	grpc *grpc.Server
	// api is the RPC endpoints of the replicated state (jobs, nodes,
	// allocs, volumes, claims, ...); operator and status are the core's.
	api  *endpoints.Set
	pool *rpc.Pool

	heartbeats *nodes.Heartbeater
	// nodeIdentity is the node identity enforcement (Config.NodeIdentityEnforcement).
	nodeIdentity *endpoints.NodeIdentity
	// statuses proposes node status changes (the heartbeats' down and
	// ready markings).
	statuses  *nodes.Statuses
	discovery *discovery
	// evals hands evaluations to the scheduler workers while this server
	// leads; drainer moves allocs off draining nodes; gc holds the
	// collector's thresholds.
	evals   *evals.Runner
	drainer *nodes.Drainer
	gc      gcConfig
	gcTimes timeTable
	// volumes runs the attach reconciler, the reaper and the reconcile
	// pass while this server leads (volumeloops).
	volumes *volumeloops.Loops
	// tunnels holds the nodes' tunnels; proxy reaches nodes over them.
	tunnels *tunnel.Registry
	proxy   *clientproxy.Proxy
	// csi makes the servers' CSI controller calls through the clients.
	csi *clientproxy.CSIForwarder

	leaderNotify chan bool
	// ready is set while this server leads and has applied everything
	// earlier leaders committed (its barrier passed); leader-only requests
	// wait for it so they never see state older than an acknowledged write.
	ready *readiness
	// duties records the state store the leader's duties run on (leadOnce),
	// so a snapshot restore answers once they run on the restored one.
	duties *dutiesStore
	// leaving is set when a graceful leave starts; discovery then stops, so
	// it does not join the server back while it leaves.
	leaving atomic.Bool
	// forming is held by a discovery round that may join the cluster
	// (formOrJoin); Leave waits for it, so a join in flight cannot add
	// the server back after its leave removed it.
	forming sync.Mutex

	shutdownOnce sync.Once
	shutdownCtx  context.Context
	cancel       context.CancelFunc
	wg           sync.WaitGroup

	// aclOnce makes acl, the resolver of ACL tokens (acl.go).
	aclOnce sync.Once
	acl     *authz.Resolver

	// belowGate rate-limits the leader's Error about raft members below
	// an in-apply gate (join_gate_member.go).
	belowGate memberBelowGateLog

	// restoring is the operator snapshot restore under way on this
	// leader, one at a time (restore_serial.go).
	restoring restoreGate

	// death is the leader-death detector's tally (leader_death.go);
	// raftTimeouts what a hurried election puts back (raft_hurry.go).
	death        leaderDeath
	raftTimeouts raftTimeouts
}

// New starts a server: raft (bootstrapped at once when BootstrapExpect is 1
// and there is no prior state), the gRPC services on lis, discovery and the
// leadership monitor. Shutdown stops it.
func New(cfg *Config, lis net.Listener) (*Server, error) {
	return newServer(cfg, lis, options{})
}

// newServer is New with the options only this package's tests set.
func newServer(cfg *Config, lis net.Listener, opts options) (*Server, error) {
	cfg = cfg.withDefaults()
	opts = opts.withDefaults()
	if err := cfg.validate(opts); err != nil {
		return nil, err
	}
	id, err := serverID(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:          cfg,
		opts:         opts,
		id:           id,
		logger:       cfg.Logger,
		fsm:          fsm.New(cfg.Logger.Named("fsm")),
		pool:         rpc.NewPool(tlsconf.DialOptions(cfg.TLS)...),
		leaderNotify: make(chan bool, 16),
		ready:        newReadiness(),
		duties:       newDutiesStore(),
		shutdownCtx:  ctx,
		cancel:       cancel,
	}
	s.fsm.SetQueryTurn(newTurnstile(spreadPerQuery).wait)
	var statusHooks nodes.StatusHooks
	if h := opts.hooks; h != nil {
		// Read at each change: a test sets it once the server runs.
		statusHooks.BeforeNodeStatus = func(nodeID string) {
			if h.beforeNodeStatus != nil {
				h.beforeNodeStatus(nodeID)
			}
		}
	}
	s.statuses = nodes.NewStatuses(core{s}, cfg.Clock, cfg.Logger, statusHooks)
	if s.nodeIdentity, err = endpoints.NewNodeIdentity(cfg.NodeIdentityEnforcement, core{s}, cfg.Logger.Named("node_identity"), cfg.Clock); err != nil {
		cancel()
		return nil, err
	}
	s.heartbeats = nodes.NewHeartbeater(s.statuses, cfg.Clock, cfg.HeartbeatTTL, cfg.HeartbeatGrace, cfg.Logger.Named("heartbeat")).
		WithMaxPerSecond(float64(cfg.MaxHeartbeatsPerSecond))
	s.discovery = newDiscovery(s)
	var evalHooks evals.Hooks
	if opts.hooks != nil {
		evalHooks.BeforePlan = opts.hooks.beforePlan
	}
	s.evals = evals.NewRunner(core{s}, evals.Config{
		Workers:       cfg.NumSchedulers,
		JobLimits:     cfg.JobLimits,
		PlanPartBytes: opts.planPartBytes,
		Clock:         cfg.Clock,
		Logger:        cfg.Logger,
	}, evalHooks)
	s.drainer = nodes.NewDrainer(core{s}, cfg.Clock, cfg.Logger)
	s.gc = defaultGCConfig()
	s.tunnels = tunnel.NewRegistry(tunnel.RegistryConfig{Name: cfg.Name, Logger: cfg.Logger.Named("tunnel"),
		OnOpen:    func(sess *tunnel.Session) { s.proxy.ReleaseElsewhere(sess) },
		Keepalive: tunnelKeepalive(s.heartbeats)})
	s.proxy = clientproxy.New(clientproxy.Config{
		ID: s.id, Name: cfg.Name, Pool: s.pool, Tunnels: s.tunnels,
		Servers: func() ([]*pb.ServerMember, error) { return s.fsm.State().Servers(nil) },
		Allocs:  clientproxy.StateAllocs(s.fsm.State),
		Logger:  cfg.Logger, Done: s.shutdownCtx, Go: s.goRun,
	}, opts.proxy)
	s.csi = clientproxy.NewCSIForwarder(s.proxy)
	caller := opts.controllerCaller
	switch {
	case opts.noControllerCalls:
		caller = nil
	case caller == nil:
		caller = s.csi
	}
	s.volumes = volumeloops.New(core{s}, caller, volumeloops.Config{
		ForceDetachAfter:  cfg.ForceDetachAfter,
		ReconcileInterval: cfg.VolumeReconcileInterval,
		Clock:             cfg.Clock,
		Logger:            cfg.Logger,
	})

	if err := s.setupRaft(); err != nil {
		s.closeStores()
		cancel()
		return nil, err
	}

	// The TLS role check (tlsServerOptions) runs first, then ACL, then
	// forwarding, then the node identity check: gRPC chains interceptors
	// in the order of the options.
	grpcOpts := append(append(rpc.ServerOptions(), s.tlsServerOptions()...),
		grpc.ChainUnaryInterceptor(errorInterceptor(), s.aclUnaryInterceptor(), s.forwardInterceptor(), s.nodeIdentityInterceptor()),
		grpc.ChainStreamInterceptor(s.aclStreamInterceptor(), s.nodeIdentityStreamInterceptor()),
	)
	if n := cfg.MaxRequestBytes; n > 0 {
		grpcOpts = append(grpcOpts, grpc.MaxRecvMsgSize(n))
	}
	if d := cfg.RPCHandshakeTimeout; d > 0 {
		// The RPC listener's limit (internal/connlimit) sees only the
		// first byte; this closes a handshake that stalls after it.
		grpcOpts = append(grpcOpts, grpc.ConnectionTimeout(d))
	}
	s.grpc = grpc.NewServer(grpcOpts...)
	pb.RegisterStatusServer(s.grpc, &statusEndpoint{s: s})
	pb.RegisterOperatorServer(s.grpc, &operatorEndpoint{s: s})
	s.api = endpoints.New(s.endpointDeps(), endpoints.Hooks{})
	s.api.Register(s.grpc)
	pb.RegisterTunnelServer(s.grpc, s.tunnels)
	pb.RegisterClientProxyServer(s.grpc, s.proxy)
	pb.RegisterTunnelPeersServer(s.grpc, clientproxy.NewPeers(s.proxy))
	pb.RegisterCSIRelayServer(s.grpc, clientproxy.NewCSIRelay(s.csi))
	s.goRun(func() {
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.logger.Error("rpc server stopped", "error", err)
		}
	})

	s.goRun(s.monitorLeadership)
	s.goRun(s.discovery.run)
	s.goRun(s.watchLeaderDeath)
	s.logger.Info("server started", "id", s.id, "name", cfg.Name, "rpc", cfg.RPCAddr, "raft", s.raftAddr(), "bootstrap_expect", cfg.BootstrapExpect)
	return s, nil
}

// endpointDeps is what the RPC endpoints get of this server.
func (s *Server) endpointDeps() endpoints.Deps {
	return endpoints.Deps{
		Reader: core{s}, Proposer: core{s}, Cluster: core{s},
		Heartbeats: s.heartbeats, Drainer: s.drainer, GC: core{s}, Calls: s.csi, NodeCalls: s.csi,
		Clock: s.cfg.Clock, Logger: s.cfg.Logger, JobLimits: s.cfg.JobLimits, HeartbeatTTL: s.cfg.HeartbeatTTL,
		ClientWatchBytes: s.opts.clientWatchBytes, Detacher: s.csi, HostVolumeCalls: s.csi,
		ACL: s.aclResolver(), ACLEnabled: s.cfg.ACLEnabled, ACLResetFile: s.aclResetFile(),
		NodeIdentity: s.nodeIdentity,
	}
}

// serverID returns the configured ID or the one persisted in the data dir,
// creating it on first start so a restarted server keeps its raft identity.
func serverID(cfg *Config) (string, error) {
	if cfg.ID != "" {
		return cfg.ID, nil
	}
	if cfg.DataDir == "" {
		return uuid.Generate(), nil
	}
	path := filepath.Join(cfg.DataDir, "server", "id")
	if b, err := os.ReadFile(path); err == nil {
		id := strings.TrimSpace(string(b))
		if !uuid.Valid(id) {
			return "", fmt.Errorf("server id file %s: %q is not a valid id", path, id)
		}
		return id, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading server id: %w", err)
	}
	id := uuid.Generate()
	if err := atomicfile.Write(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("persisting server id: %w", err)
	}
	return id, nil
}

func (s *Server) setupRaft() error {
	rc := s.cfg.raftConfig(s.id)
	rc.NotifyCh = s.leaderNotify
	s.useRaftLease(rc)

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if s.cfg.DataDir == "" {
		store := raft.NewInmemStore()
		logs, stable = store, store
		snaps = raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(s.cfg.DataDir, "server", "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("creating raft dir: %w", err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		if err != nil {
			return fmt.Errorf("opening raft log store %s: %w", filepath.Join(dir, "raft.db"), err)
		}
		// The log's compaction runs beside raft, not in its way
		// (raft_log_compact.go); closing it closes bolt.
		compacting := newCompactingLogStore(bolt, s.logger.Named("raft-log"))
		s.stores = append(s.stores, compacting)
		cache, err := raft.NewLogCache(512, compacting)
		if err != nil {
			return err
		}
		logs, stable = cache, bolt
		fileSnaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, s.logger.Named("snapshot"))
		if err != nil {
			return fmt.Errorf("opening raft snapshot store: %w", err)
		}
		snaps = fileSnaps
	}

	if s.opts.raftTransport != nil {
		s.transport = s.opts.raftTransport
	} else if s.cfg.TLS != nil {
		t, err := s.newTLSRaftTransport()
		if err != nil {
			return fmt.Errorf("raft transport on %s: %w", s.cfg.RaftAddr, err)
		}
		s.transport = t
	} else {
		// No separate advertise address: raft advertises what it bound, so
		// port 0 (tests) works and the advertised port is always real.
		t, err := raft.NewTCPTransportWithLogger(s.cfg.RaftAddr, nil, 3, 10*time.Second, s.logger.Named("raft-net"))
		if err != nil {
			return fmt.Errorf("raft transport on %s: %w", s.cfg.RaftAddr, err)
		}
		s.transport = t
	}

	s.logs = logs
	hasState, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("reading raft state: %w", err)
	}
	s.hadState = hasState
	if !hasState && s.cfg.BootstrapExpect == 1 && len(s.cfg.RetryJoin) == 0 {
		conf := raft.Configuration{Servers: []raft.Server{{
			ID: raft.ServerID(s.id), Address: s.transport.LocalAddr(), Suffrage: raft.Voter,
		}}}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, s.transport, conf); err != nil {
			return fmt.Errorf("bootstrapping single-server cluster: %w", err)
		}
		s.hadState = true
	}

	tf := &timedFSM{fsm: s.fsm}
	if s.opts.hooks != nil {
		tf.beforeApply = s.opts.hooks.beforeApply
		tf.beforeRestore = s.opts.hooks.beforeRestore
		s.fsm.SetDeferredDecodeHook(s.opts.hooks.beforeDeferredDecode)
	}
	s.fsm.DescribeRestores(func() []any { return newestSnapshot(snaps) })
	r, err := raft.NewRaft(rc, tf, logs, stable, snaps, s.transport)
	if err != nil {
		return fmt.Errorf("starting raft: %w", err)
	}
	s.raft = r
	s.raftTimeouts.normal = r.ReloadableConfig()
	// Raft restored this server's own snapshot synchronously above; a
	// snapshot installed from the leader from now on is answered for
	// once it is on disk and decoded after (fsm/restore_deferred.go).
	s.fsm.DeferRestores(true)
	return nil
}

// ID returns the server's raft ID.
func (s *Server) ID() string { return s.id }

// State returns the replicated state store (local, possibly stale on a follower).
func (s *Server) State() *fsm.StateStore { return s.fsm.State() }

// Raft exposes the raft node to tests and the agent's status endpoints.
func (s *Server) Raft() *raft.Raft { return s.raft }

// IsLeader reports whether this server is the raft leader.
func (s *Server) IsLeader() bool { return s.raft.State() == raft.Leader }

func (s *Server) raftAddr() string { return string(s.transport.LocalAddr()) }

// self describes this server as recorded in the servers table.
func (s *Server) self() *pb.ServerMember {
	return &pb.ServerMember{
		Id:       s.id,
		Name:     s.cfg.Name,
		RpcAddr:  s.cfg.RPCAddr,
		RaftAddr: s.raftAddr(),
		HttpAddr: s.cfg.HTTPAddr,
		Version:  s.cfg.Version,
	}
}

func (s *Server) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Leave removes this server from the raft configuration (a graceful leave).
func (s *Server) Leave(ctx context.Context) error {
	s.leaving.Store(true)
	// Wait, within ctx, for a discovery round in flight (its join would
	// add this server back); leaving stops new ones.
	for !s.forming.TryLock() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("leaving: a join of this server is still in flight: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	s.forming.Unlock()
	if s.IsLeader() {
		// The leader may remove itself: it steps down once the change commits.
		return s.removePeer(ctx, s.id)
	}
	leader, err := s.leaderConn(ctx)
	if err != nil {
		return fmt.Errorf("leaving: %w", err)
	}
	_, err = pb.NewOperatorClient(leader).RemovePeer(ctx, &pb.RemovePeerRequest{Id: s.id})
	return err
}

// Shutdown stops the server: leaves first when LeaveOnTerminate is set, then
// stops RPC, raft and every loop. It is safe to call more than once.
func (s *Server) Shutdown() error {
	var err error
	s.shutdownOnce.Do(func() {
		if s.cfg.LeaveOnTerminate {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if lerr := s.Leave(ctx); lerr != nil {
				s.logger.Warn("graceful leave failed", "error", lerr)
			}
			cancel()
		}
		s.cancel()
		s.heartbeats.Close()
		// Tunnels never end by themselves: close them so the graceful
		// stop below does not wait for them.
		s.tunnels.Close()
		stopped := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			s.grpc.Stop()
		}
		// A snapshot decoding after raft installed it that fails from now
		// on is only logged (fsm.Close).
		s.fsm.Close()
		err = s.raft.Shutdown().Error()
		if c, ok := s.transport.(raft.WithClose); ok {
			_ = c.Close()
		}
		s.wg.Wait()
		s.pool.Close()
		s.closeStores()
		s.logger.Info("server stopped")
	})
	return err
}

func (s *Server) closeStores() {
	for _, c := range s.stores {
		_ = c.Close()
	}
	s.stores = nil
}

// RaftAddr returns the address raft listens on.
func (s *Server) RaftAddr() string { return s.raftAddr() }

// RPCAddr returns the address the RPC server is advertised at.
func (s *Server) RPCAddr() string { return s.cfg.RPCAddr }
