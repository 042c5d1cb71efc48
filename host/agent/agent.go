package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"berth.dev/berth/csi/adapters"
	"berth.dev/berth/csi/pluginmanager"
	"berth.dev/berth/csi/registry"
	"berth.dev/berth/host/client"
	"berth.dev/berth/host/client/allocrunner"
	"berth.dev/berth/host/client/state"
	"berth.dev/berth/host/server"
	"berth.dev/berth/internal/runhooks"
	"berth.dev/berth/internal/tlsconf"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/taskdrivers"
	"berth.dev/berth/volumehooks"
)

// Agent is a running berth agent.
type Agent struct {
	cfg    *Config
	logger hclog.Logger

	dataDir string
	// ownsDataDir is true in dev mode: the temporary data dir is removed at exit.
	ownsDataDir bool

	server *server.Server
	client *client.Client
	// state is the client state DB and drivers the task driver manager,
	// both of the client role.
	state   *state.DB
	drivers *taskdrivers.Manager
	// adapters runs the CSI storage adapters; nil when there are none.
	adapters *adapters.Manager
	// stopSupervisors ends the csi_plugin supervisors at shutdown (their
	// plugins keep running, and stay registered, for the next start).
	stopSupervisors context.CancelFunc

	httpLis net.Listener
	http    *http.Server
	pool    *rpc.Pool
	// rpcAddrs are the server RPC addresses the HTTP API calls: this agent's
	// own server, else the client's servers.
	rpcAddrs []string

	shutdownOnce sync.Once
	// tls is the TLS material when the tls block turns TLS on (tls.go).
	tls *tlsconf.Store

	// allowed remembers the HTTP routes' ACL decisions a while (http_acl.go).
	allowed aclDecisions
}

// NewLogger builds the agent's logger from its config.
func NewLogger(cfg *Config, out io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "berth",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		JSONFormat: cfg.LogJSON,
		Output:     out,
	})
}

// New starts an agent from a validated config.
func New(cfg *Config, logger hclog.Logger) (_ *Agent, err error) {
	// Not the named result: `return nil, err` would nil it before the
	// deferred cleanup runs.
	tlsStore, err := newTLSStore(cfg)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, logger: logger, tls: tlsStore}
	a.pool = rpc.NewPool(a.rpcDialOptions()...)
	defer func() {
		if err != nil {
			a.Shutdown()
		}
	}()
	// Installed before raft starts so its first election is counted.
	if err := InitMetrics(); err != nil {
		return nil, err
	}
	if err := a.setupDataDir(); err != nil {
		return nil, err
	}
	name, err := cfg.AgentName()
	if err != nil {
		return nil, err
	}

	a.httpLis, err = net.Listen("tcp", cfg.HTTPAddr())
	if err != nil {
		return nil, fmt.Errorf("http listener on %s: %w", cfg.HTTPAddr(), err)
	}
	// The connection limit counts TCP connections; TLS goes on top, so
	// the HTTP server sees *tls.Conn and can speak HTTP/2.
	a.httpLis = a.listenHTTP(a.limitHTTP(a.httpLis, cfg.Limits))
	httpAddr := a.httpLis.Addr().String()

	if cfg.Server.Enabled {
		// Process-wide: the collector's share of a server's CPU is large
		// (see server.DefaultGCPercent), and a server is what this process
		// is for once it runs one.
		// Zero is a Config built in Go without DefaultConfig (Validate
		// refuses it in a file): the default, not a collector that never rests.
		gcPercent := cfg.Server.GCPercent
		if gcPercent == 0 {
			gcPercent = server.DefaultGCPercent
		}
		prev := debug.SetGCPercent(gcPercent)
		logger.Debug("collector target set for the server", "gc_percent", gcPercent, "was", prev)
		rpcLis, err := net.Listen("tcp", cfg.RPCAddr())
		if err != nil {
			return nil, fmt.Errorf("rpc listener on %s: %w", cfg.RPCAddr(), err)
		}
		// A dev agent's data dir is temporary (removed at exit, and a new
		// one made at each start), so its raft state lives in memory, as a
		// Nomad dev agent's does: no restart could read it back, and every
		// raft write would wait on an fsync for nothing.
		serverDir := a.dataDir
		if a.ownsDataDir {
			serverDir = ""
		}
		scfg := &server.Config{
			Name:                    name,
			DataDir:                 serverDir,
			RPCAddr:                 rpcLis.Addr().String(),
			RaftAddr:                cfg.RaftAddr(),
			HTTPAddr:                httpAddr,
			BootstrapExpect:         cfg.Server.BootstrapExpect,
			RetryJoin:               cfg.Server.RetryJoin,
			RetryInterval:           cfg.Server.RetryInterval,
			HeartbeatTTL:            cfg.Server.HeartbeatTTL,
			HeartbeatGrace:          cfg.Server.HeartbeatGrace,
			LeaveOnTerminate:        cfg.Server.LeaveOnTerminate,
			RaftSnapshotThreshold:   cfg.Server.RaftSnapshotThreshold,
			SnapshotRestoreMaxBytes: cfg.Server.SnapshotRestoreMaxBytes,
			RaftSnapshotInterval:    cfg.Server.RaftSnapshotInterval,
			RaftTrailingLogs:        cfg.Server.RaftTrailingLogs,
			ForceDetachAfter:        cfg.Server.ForceDetachAfter,
			VolumeReconcileInterval: cfg.Server.VolumeReconcileInterval,
			JobLimits:               cfg.Server.JobLimits,
			Logger:                  logger.Named("server"),
			Version:                 version.Version,
			TLS:                     a.rpcTLS(),
			ACLEnabled:              cfg.ACL.Enabled,
			MaxRequestBytes:         cfg.Limits.MaxRequestBytes,
			RPCHandshakeTimeout:     cfg.Limits.RPCHandshakeTimeout,
			NodeIdentityEnforcement: cfg.Server.NodeIdentityEnforcement,
			MaxHeartbeatsPerSecond:  cfg.Server.MaxHeartbeatsPerSecond,
			RaftCommitTimeout:       cfg.Server.RaftCommitTimeout,
		}
		if cfg.DevMode {
			// A dev agent is alone: elect itself at once, check nodes often.
			scfg.RaftTimeoutScale = 0.5
		}
		a.server, err = server.New(scfg, a.limitRPC(rpcLis, cfg.Limits))
		if err != nil {
			rpcLis.Close()
			return nil, fmt.Errorf("starting server: %w", err)
		}
		a.rpcAddrs = []string{scfg.RPCAddr}
	}

	if cfg.Client.Enabled {
		servers := cfg.Client.Servers
		if len(servers) == 0 && a.server != nil {
			servers = a.rpcAddrs
		}
		nodeName, err := cfg.NodeName()
		if err != nil {
			return nil, err
		}
		hostVolumes, err := cfg.HostVolumeInfos()
		if err != nil {
			return nil, err
		}
		if err := a.startDrivers(); err != nil {
			return nil, err
		}
		// Storage adapters start before the client, told the node ID the
		// client will register with, so the client's plugin manager knows
		// every plugin from its start: its first report to the servers
		// then holds them all.
		nodeID, err := client.LoadNodeID(a.dataDir)
		if err != nil {
			return nil, err
		}
		if err := a.startAdapters(nodeID, nodeName); err != nil {
			return nil, err
		}
		var adapters pluginmanager.AdapterSource
		if a.adapters != nil {
			adapters = adapterSource{a.adapters}
		}
		// One registry: the csi_plugin supervisor registers task plugins in
		// it, the client restores it and its plugin manager follows it.
		csiRegistry := registry.New(a.state, registry.WithLogger(logger.Named("csi-registry")))
		supCtx, stopSupervisors := context.WithCancel(context.Background())
		a.stopSupervisors = stopSupervisors
		supervisor := volumehooks.NewCSIPluginSupervisor(volumehooks.SupervisorConfig{
			DataDir:  a.dataDir,
			Registry: csiRegistry,
			Logger:   logger.Named("csi-supervisor"),
			Context:  supCtx,
		})
		a.client, err = client.New(client.Config{
			DataDir:          a.dataDir,
			NodeName:         nodeName,
			Servers:          servers,
			HTTPAddr:         httpAddr,
			Logger:           logger.Named("client"),
			Drivers:          a.drivers.DriverInfos,
			DriversChanged:   a.drivers.Changed(),
			ReservedCPUMHz:   int64(cfg.Client.ReservedCPUMHz),
			ReservedMemoryMB: int64(cfg.Client.ReservedMemoryMB),
			TaskDrivers:      client.ManagerDrivers(a.drivers),
			State:            a.state,
			CSIRegistry:      csiRegistry,
			Hooks:            allocrunner.Hooks{Task: []func(runhooks.AllocInfo, *pb.Task) runhooks.Hook{supervisor}},
			CSIAdapters:      adapters,
			TLS:              a.rpcTLS(),
			HostVolumes:      hostVolumes,
			HostVolumesDir:   cfg.Client.HostVolumesDir,
			HostVolumePluginDir: func() string {
				if d := cfg.Client.HostVolumePluginDir; d != "" {
					return d
				}
				return filepath.Join(a.dataDir, "host_volume_plugins")
			}(),
			Identity: a.state,
		})
		if err != nil {
			return nil, fmt.Errorf("starting client: %w", err)
		}
		if a.rpcAddrs == nil {
			a.rpcAddrs = servers
		}
	}

	// A connection idle between requests is closed after 2 minutes (a
	// blocking query or a followed log is a request in flight, not idle).
	a.http = &http.Server{Handler: a.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := a.http.Serve(a.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.logger.Error("http server stopped", "error", err)
		}
	}()
	a.logger.Info("agent started", "name", name, "http", httpAddr, "server", cfg.Server.Enabled, "client", cfg.Client.Enabled, "data_dir", a.dataDir)
	return a, nil
}

func (a *Agent) setupDataDir() error {
	if a.cfg.DataDir == "" {
		if !a.cfg.DevMode {
			return errors.New("data_dir is required outside dev mode")
		}
		dir, err := os.MkdirTemp("", "berth-dev-")
		if err != nil {
			return fmt.Errorf("creating dev data dir: %w", err)
		}
		a.dataDir, a.ownsDataDir = dir, true
		return nil
	}
	dir, err := filepath.Abs(a.cfg.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating data dir: %w", err)
	}
	a.dataDir = dir
	return nil
}

// HTTPAddr returns the address the HTTP API listens on.
func (a *Agent) HTTPAddr() string { return a.httpLis.Addr().String() }

// DataDir returns the agent's data directory.
func (a *Agent) DataDir() string { return a.dataDir }

// Server returns the server role, nil when disabled.
func (a *Agent) Server() *server.Server { return a.server }

// Client returns the client role, nil when disabled.
func (a *Agent) Client() *client.Client { return a.client }

// Shutdown stops the HTTP API, the client, its task driver plugins, then the
// server, and removes a dev data dir. Tasks keep running under their
// executors and their handles stay in the client state DB, so the next
// start recovers them; a dev agent, whose data dir goes, stops its tasks
// first. It is safe to call more than once.
func (a *Agent) Shutdown() {
	a.shutdownOnce.Do(func() {
		if a.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := a.http.Shutdown(ctx); err != nil {
				// Long polls outlived the grace period: cut them.
				_ = a.http.Close()
			}
			cancel()
		} else if a.httpLis != nil {
			a.httpLis.Close()
		}
		if a.client != nil {
			a.client.Shutdown()
		}
		if a.stopSupervisors != nil {
			a.stopSupervisors()
		}
		a.stopAdapters()
		a.stopDrivers()
		if a.server != nil {
			if err := a.server.Shutdown(); err != nil {
				a.logger.Warn("server shutdown", "error", err)
			}
		}
		a.pool.Close()
		if a.ownsDataDir {
			if err := os.RemoveAll(a.dataDir); err != nil {
				a.logger.Warn("removing dev data dir", "dir", a.dataDir, "error", err)
			}
		}
		a.logger.Info("agent stopped")
	})
}
