package agent

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/server"
	"berth.dev/berth/host/server/endpoints"
)

// Default ports of an agent. The RPC port is also the port assumed for a
// retry_join or client servers entry that names no port.
const (
	DefaultHTTPPort = 7646
	DefaultRPCPort  = 7647
	DefaultRaftPort = 7648
)

// Config is an agent's configuration: what `berth run -config` reads, after
// defaults and every file are merged. Build one with DefaultConfig, DevConfig,
// ParseConfig or LoadConfigFiles, combine them with Merge and check the result
// with Validate before starting the agent.
type Config struct {
	// Name names this agent; servers use it as their raft server name.
	// Empty means the host name (see AgentName).
	Name string
	// DataDir holds raft, client state and allocation directories. Empty
	// is allowed only in dev mode, where the agent creates a temporary one.
	DataDir string
	// BindAddr is the IP address every listener binds to and the address
	// advertised to raft peers.
	BindAddr string
	// Ports are the HTTP, RPC and raft ports on BindAddr.
	Ports Ports
	// Server configures the server role.
	Server ServerConfig
	// Client configures the client role.
	Client ClientConfig
	// PluginDir is where third-party plugin binaries are found. Empty means
	// <DataDir>/plugins (see EffectivePluginDir).
	PluginDir string
	// Plugins holds each plugin block by plugin name.
	Plugins map[string]*PluginConfig
	// LogLevel is one of trace, debug, info, warn, error.
	LogLevel string
	// LogJSON switches the log output from text to JSON lines.
	LogJSON bool
	// DevMode marks a `berth run -dev` agent. It is never read from files.
	DevMode bool
	// Region names this agent's region: the middle label of the role
	// names in TLS certificates (server.<region>.berth). Empty is "global".
	Region string
	// TLS is the tls block (config_tls.go): mutual TLS and HTTPS.
	TLS TLSConfig
	// ACL is the acl block (config_acl.go).
	ACL ACLConfig
	// Limits are the per-client connection limits and the largest request
	// (limits { … }, config_conn_limits.go).
	Limits LimitsConfig

	// set records which fields a configuration file set, by field path
	// ("server.enabled"), and where. Merge consults it to tell a value a file
	// set to zero from a value no file mentioned. nil means the Config was
	// built in Go; then its non-zero fields count as set.
	set map[string]SourcePos
}

// Ports are the TCP ports an agent listens on.
type Ports struct {
	// HTTP serves the JSON API and the CLI.
	HTTP int
	// RPC serves server-to-server and client-to-server gRPC.
	RPC int
	// Raft carries raft traffic between servers.
	Raft int
}

// ServerConfig configures the server role: a raft voter that serves the API
// and runs the leader loops.
type ServerConfig struct {
	// Enabled turns the server role on.
	Enabled bool
	// BootstrapExpect is the number of servers to wait for before
	// bootstrapping raft. It has no default: guessing it wrong splits a
	// cluster into several.
	BootstrapExpect int
	// RetryJoin lists servers (host:port, RPC port) to join until one answers.
	RetryJoin []string
	// RetryInterval is the pause between join attempts.
	RetryInterval time.Duration
	// HeartbeatTTL is how long a node may miss heartbeats before it is down.
	HeartbeatTTL time.Duration
	// HeartbeatGrace is extra time every node gets after a leader change,
	// so a new leader does not mark nodes down before they found it.
	HeartbeatGrace time.Duration
	// LeaveOnTerminate removes this server from the raft configuration on
	// SIGTERM or SIGINT instead of leaving it a (missing) voter.
	LeaveOnTerminate bool
	// RaftSnapshotThreshold is the number of raft log entries between snapshots.
	RaftSnapshotThreshold uint64
	// SnapshotRestoreMaxBytes bounds a snapshot restore's upload
	// (snapshot_restore_max_size); 0 is server.DefaultSnapshotRestoreMaxBytes.
	SnapshotRestoreMaxBytes int64
	// RaftSnapshotInterval is how often raft checks whether to snapshot.
	RaftSnapshotInterval time.Duration
	// RaftTrailingLogs is the number of log entries kept after a snapshot,
	// so a slightly lagging follower catches up without a snapshot install.
	RaftTrailingLogs uint64
	// ForceDetachAfter is how long a node may stay down before the leader
	// releases its volume claims without its client's word (the controller
	// unpublish still runs); `berth node fence` does it at once.
	ForceDetachAfter time.Duration
	// VolumeReconcileInterval is the period of the leader's pass comparing
	// what controllers report published with the attachments.
	VolumeReconcileInterval time.Duration
	// GCPercent is the Go collector's target (debug.SetGCPercent) set when
	// the agent runs a server: process-wide, so it also governs an agent's
	// client role; it overrides GOGC. A client-only agent keeps Go's
	// default (or GOGC). Default server.DefaultGCPercent.
	GCPercent int
	// JobLimits bound what one job may ask for (job_max_count,
	// job_max_groups, job_max_tasks, job_max_allocs, job_max_size); the
	// servers refuse a job over one before doing anything with it.
	// Defaults: jobspec's Default* constants.
	JobLimits jobspec.Limits
	// NodeIdentityEnforcement (node_identity_enforcement) is what the
	// server does with a registration or node call for a node without a
	// secret: "warn" (default) admits it, logged and counted; "strict"
	// refuses it (server.Config.NodeIdentityEnforcement).
	NodeIdentityEnforcement string
	// MaxHeartbeatsPerSecond (max_heartbeats_per_second, default 50)
	// scales the heartbeat TTL with the nodes, heartbeat_ttl being the
	// shortest (server.Config.MaxHeartbeatsPerSecond).
	MaxHeartbeatsPerSecond int
	// RaftCommitTimeout (raft_commit_timeout, default 5ms) is how soon an
	// idle leader tells its followers what it committed
	// (server.DefaultRaftCommitTimeout: follower staleness against idle
	// CPU).
	RaftCommitTimeout time.Duration
}

// ClientConfig configures the client role: a node that runs allocations.
type ClientConfig struct {
	// Enabled turns the client role on.
	Enabled bool
	// Servers lists servers (host:port, RPC port) the client registers with.
	// It may be empty when the same agent runs a server.
	Servers []string
	// NodeName names the node. Empty means Name, else the host name
	// (see NodeName).
	NodeName string
	// ReservedCPUMHz and ReservedMemoryMB are kept back from the scheduler
	// for the agent and the system.
	ReservedCPUMHz   int
	ReservedMemoryMB int
	// HostVolumes are the host_volume blocks by name (config_host_volume.go).
	HostVolumes map[string]*HostVolumeConfig
	// HostVolumesDir is where the built-in mkdir plugin makes dynamic
	// host volumes; empty means <data_dir>/host_volumes.
	HostVolumesDir string
	// HostVolumePluginDir holds host volume plugin executables; empty
	// means <data_dir>/host_volume_plugins.
	HostVolumePluginDir string
}

// Plugin types: what a plugin block configures.
const (
	// PluginTypeDriver is a task driver plugin (the default).
	PluginTypeDriver = "driver"
	// PluginTypeCSI is a CSI storage adapter (csi/adapters).
	PluginTypeCSI = "csi"
)

// PluginConfig is one `plugin "name" { type = "..." config { ... } }` block.
type PluginConfig struct {
	// Name is the plugin's name, the block's label.
	Name string
	// Type is PluginTypeDriver or PluginTypeCSI; empty means a driver.
	Type string
	// Config is the block's config body as JSON-compatible values: string,
	// bool, int64, float64, nil, []any and map[string]any. The plugin's own
	// schema validates it when the plugin is loaded.
	Config map[string]any
	// Source is "file:line" of the plugin block, for the plugin loader's
	// error messages; empty for plugins configured in Go.
	Source string
}

// DefaultConfig returns the configuration an agent starts from before any file
// is merged. It enables neither role and has no data dir, so it does not
// validate on its own.
func DefaultConfig() *Config {
	return &Config{
		BindAddr: "127.0.0.1",
		Ports:    Ports{HTTP: DefaultHTTPPort, RPC: DefaultRPCPort, Raft: DefaultRaftPort},
		Server: ServerConfig{
			RetryInterval:           5 * time.Second,
			HeartbeatTTL:            10 * time.Second,
			HeartbeatGrace:          10 * time.Second,
			RaftSnapshotThreshold:   8192,
			RaftSnapshotInterval:    120 * time.Second,
			RaftTrailingLogs:        10240,
			SnapshotRestoreMaxBytes: server.DefaultSnapshotRestoreMaxBytes,
			// As Kubernetes' attach-detach controller waits.
			ForceDetachAfter:        6 * time.Minute,
			VolumeReconcileInterval: 5 * time.Minute,
			GCPercent:               server.DefaultGCPercent,
			JobLimits:               jobspec.Limits{}.WithDefaults(),
			NodeIdentityEnforcement: endpoints.EnforceWarn,
			RaftCommitTimeout:       server.DefaultRaftCommitTimeout,
		},
		Plugins:  map[string]*PluginConfig{},
		LogLevel: "info",
		Limits:   DefaultLimits(),
	}
}

// DevConfig returns the configuration of `berth run -dev`: one agent that is
// both the only server and a client, on 127.0.0.1, with raw_exec enabled
// (and exec, when run as root) and
// an empty DataDir that tells the agent to create a temporary one.
func DevConfig() *Config {
	c := DefaultConfig()
	c.DevMode = true
	c.Server.Enabled = true
	c.Server.BootstrapExpect = 1
	c.Client.Enabled = true
	c.Plugins["raw_exec"] = &PluginConfig{Name: "raw_exec", Config: map[string]any{"enabled": true}}
	// exec isolates with namespaces, mounts and cgroups, which need root;
	// a dev agent run as another user leaves it disabled rather than
	// showing it unhealthy.
	if os.Geteuid() == 0 {
		c.Plugins["exec"] = &PluginConfig{Name: "exec", Config: map[string]any{"enabled": true}}
	}
	return c
}

// HTTPAddr returns the address the HTTP API listens on.
func (c *Config) HTTPAddr() string { return joinPort(c.BindAddr, c.Ports.HTTP) }

// RPCAddr returns the address the RPC server listens on.
func (c *Config) RPCAddr() string { return joinPort(c.BindAddr, c.Ports.RPC) }

// RaftAddr returns the address raft listens on and advertises to its peers.
func (c *Config) RaftAddr() string { return joinPort(c.BindAddr, c.Ports.Raft) }

func joinPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// AgentName returns Name, or the host name when Name is empty.
func (c *Config) AgentName() (string, error) {
	if c.Name != "" {
		return c.Name, nil
	}
	return os.Hostname()
}

// NodeName returns the client's node name: Client.NodeName, else Name, else
// the host name.
func (c *Config) NodeName() (string, error) {
	if c.Client.NodeName != "" {
		return c.Client.NodeName, nil
	}
	return c.AgentName()
}

// IsCSI reports whether p configures a storage adapter rather than a
// task driver.
func (p *PluginConfig) IsCSI() bool { return p.Type == PluginTypeCSI }

// EffectivePluginDir returns PluginDir, or <DataDir>/plugins when PluginDir is
// empty. In dev mode call it after the agent has chosen its data dir; with
// neither set it returns "".
func (c *Config) EffectivePluginDir() string {
	if c.PluginDir != "" || c.DataDir == "" {
		return c.PluginDir
	}
	return filepath.Join(c.DataDir, "plugins")
}

// Copy returns a deep copy of c: changing the copy, its lists or plugin
// configs leaves c as it was.
func (c *Config) Copy() *Config {
	n := *c
	n.Server.RetryJoin = cloneStrings(c.Server.RetryJoin)
	n.Client.Servers = cloneStrings(c.Client.Servers)
	if c.Plugins != nil {
		n.Plugins = make(map[string]*PluginConfig, len(c.Plugins))
		for name, p := range c.Plugins {
			n.Plugins[name] = p.Copy()
		}
	}
	n.Client.HostVolumes = cloneHostVolumes(c.Client.HostVolumes)
	n.set = maps.Clone(c.set)
	return &n
}

// Copy returns a deep copy of p.
func (p *PluginConfig) Copy() *PluginConfig {
	if p == nil {
		return nil
	}
	n := *p
	n.Config = copyMap(p.Config)
	return &n
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}
