package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"berth.dev/berth/host/server/clientproxy"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/tlsconf"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/pb"
)

// Config configures a server. The agent builds it from its HCL config; tests
// build it directly (see internal/testutil).
type Config struct {
	// ID is the raft server ID. Empty: read from (or created in) DataDir.
	ID   string
	Name string
	// DataDir holds raft's log store and snapshots. Empty: in-memory stores,
	// for tests only.
	DataDir string

	// RPCAddr, RaftAddr and HTTPAddr are the advertised addresses.
	RPCAddr  string
	RaftAddr string
	HTTPAddr string

	// BootstrapExpect is how many servers must discover each other before
	// the cluster is bootstrapped; 1 bootstraps at once.
	BootstrapExpect int
	// RetryJoin lists RPC addresses of servers to discover and join.
	RetryJoin     []string
	RetryInterval time.Duration

	// HeartbeatTTL is how long a node may go without a heartbeat before the
	// leader marks it down; HeartbeatGrace is added after a leader change.
	HeartbeatTTL   time.Duration
	HeartbeatGrace time.Duration

	// NumSchedulers is how many scheduler workers the leader runs; zero
	// means defaultNumSchedulers (schedulersPerCore per CPU core).
	NumSchedulers int
	// JobLimits bounds what one job may ask for; register and plan check
	// a job against them before anything else. Unset fields take
	// jobspec's defaults.
	JobLimits jobspec.Limits

	// ForceDetachAfter is how long a node may stay down before the leader
	// forces its releasing volume claims to node-detached (the controller
	// unpublish still runs); zero means 6 minutes, as Kubernetes'.
	ForceDetachAfter time.Duration
	// VolumeReconcileInterval is the period of the leader's reconcile pass
	// comparing controllers' published volumes with the attachments; zero
	// means 5 minutes, negative turns the pass off.
	VolumeReconcileInterval time.Duration

	// LeaveOnTerminate removes this server from the raft configuration on a
	// graceful shutdown.
	LeaveOnTerminate bool

	// Raft tunables; zero keeps raft's defaults.
	RaftSnapshotThreshold uint64
	// SnapshotRestoreMaxBytes bounds a snapshot restore's upload
	// (server.snapshot_restore_max_size); 0 is
	// DefaultSnapshotRestoreMaxBytes.
	SnapshotRestoreMaxBytes int64
	RaftSnapshotInterval    time.Duration
	RaftTrailingLogs        uint64
	// RaftTimeoutScale multiplies raft's timeouts; tests use a fraction.
	RaftTimeoutScale float64

	Logger hclog.Logger
	Clock  clock.Clock
	// Version is reported in ServerMember and Ping.
	Version string
	// TLS, when set, makes every connection mutual TLS: the RPC listener,
	// the connections to other servers and raft's transport (tls.go).
	TLS *tlsconf.Store
	// ACLEnabled makes every RPC present a token its method's need
	// (host/authz) allows; see acl.go.
	ACLEnabled bool
	// MaxRequestBytes is the largest gRPC message the server receives
	// (agent limits.max_request_bytes); 0 is rpc.MaxMessageSize.
	MaxRequestBytes int
	// RPCHandshakeTimeout bounds a new RPC connection's TLS and HTTP/2
	// handshakes (agent limits.rpc_handshake_timeout): a connection that
	// has not completed them within it is closed. 0 is gRPC's 120 s.
	RPCHandshakeTimeout time.Duration
	// NodeIdentityEnforcement is what this server does with a registration
	// or node call for a node without a secret (agent
	// server.node_identity_enforcement): "warn" (or "") admits it, logged
	// and counted; "strict" refuses it once every server knows node
	// identities, but for a new or re-admitted node's adopting
	// registration (endpoints.NodeIdentity).
	NodeIdentityEnforcement string
	// MaxHeartbeatsPerSecond scales the TTL nodes are told with their
	// number, so the leader handles about this many heartbeats a second
	// at most, however many nodes (nodes.ScaledTTL; HeartbeatTTL is the
	// shortest). Zero means DefaultMaxHeartbeatsPerSecond.
	MaxHeartbeatsPerSecond int
	// RaftCommitTimeout is raft's CommitTimeout (agent
	// server.raft_commit_timeout): how soon an idle leader tells its
	// followers what it committed. Zero means DefaultRaftCommitTimeout
	// (scaled up with RaftTimeoutScale, never down); see
	// raft_commit_timeout.go for the trade-off.
	RaftCommitTimeout time.Duration
}

// DefaultMaxHeartbeatsPerSecond is Nomad's max_heartbeats_per_second. A
// node heartbeats about 3.4 times per TTL (every TTL/3 less jitter), so a
// cluster's TTL stays at heartbeat_ttl (10 s) up to about 145 nodes and
// grows past them (24 s at 350 nodes, 480 s at 7,000).
const DefaultMaxHeartbeatsPerSecond = 50

// DefaultGCPercent is the Go collector's target (debug.SetGCPercent) an
// agent running a server sets unless its config says otherwise
// (server.gc_percent). Measured on the plan that places an alloc with a
// volume claim at 64 proposers (bench, volumes section): at Go's
// 100 the collector takes about a third of the server's CPU per command;
// 200 cuts the whole CPU per command by ~30% (400 by a little more), at
// the price of a heap that peaks near 3× the live state instead of 2×.
// The setting is process-wide, so it is the agent's, not New's: a server
// embedded in another program leaves that program's collector alone.
const DefaultGCPercent = 200

// defaultLeaderWait is how long a request waits for an election, or a new
// leader's barrier, before it fails with Unavailable: long enough to ride
// out one election, short enough that a client retries elsewhere well
// within its heartbeat TTL.
const defaultLeaderWait = 5 * time.Second

// options are the server's settings that only this package's tests set:
// bounds made small, parts replaced, and the hooks that hold the server
// where a test would otherwise depend on timing. New passes none; they are
// not part of the Config an agent builds.
type options struct {
	// leaderWait bounds how long a request waits for a leader to be known,
	// or for a just-elected leader's barrier; zero means defaultLeaderWait.
	leaderWait time.Duration
	// clientWatchBytes is the byte budget of a paged ClientAllocs.Watch
	// answer's allocs and jobs; zero means endpoints.DefaultClientWatchBytes.
	clientWatchBytes int
	// planPartBytes bounds the placements, stops and claims of one plan
	// command (evals' planParts); zero means evals.DefaultPlanPartBytes.
	planPartBytes int
	// hooks hold the server where a test would otherwise depend on
	// timing (see testHooks).
	hooks *testHooks
	// controllerCaller replaces the server's CSI controller forwarder.
	controllerCaller volumeloops.ControllerCaller
	// noControllerCalls keeps the leader's attach reconciler and reconcile
	// pass from running (the reaper still runs): for tests that move
	// attachments by hand.
	noControllerCalls bool
	// raftTransport, when set, replaces the TCP transport on RaftAddr
	// (cluster tests use raft's in-memory transport).
	raftTransport raft.Transport
	// proxy sets the client proxy's deadlines and retries.
	proxy clientproxy.Tunables
	// raftLease, when set, replaces raft's leader lease (and so the
	// timeout of a hurried election, raft_hurry.go).
	raftLease time.Duration
	// roundRetry caps discovery's wait after a round that formed or
	// joined a cluster, or failed; zero means a second.
	roundRetry time.Duration
}

func (o options) withDefaults() options {
	if o.leaderWait <= 0 {
		o.leaderWait = defaultLeaderWait
	}
	if o.clientWatchBytes <= 0 {
		o.clientWatchBytes = endpoints.DefaultClientWatchBytes
	}
	if o.planPartBytes <= 0 {
		o.planPartBytes = evals.DefaultPlanPartBytes
	}
	if o.roundRetry <= 0 {
		o.roundRetry = time.Second
	}
	return o
}

// testHooks hold the server at points where a test would otherwise depend
// on timing. Production servers have none.
type testHooks struct {
	// beforeBarrier runs in the leader loop before a new leader's barrier
	// and before the barrier after a snapshot restore; it must return when
	// ctx (the leadership) ends.
	beforeBarrier func(ctx context.Context)
	// beforeApply runs on raft's FSM goroutine before each batch of log
	// entries is applied, with the batch, so a test can keep its own
	// proposals in flight.
	beforeApply func(logs []*raft.Log)
	// waitingForBarrier runs with +1 when a request starts waiting for a
	// new leader's barrier and with -1 when it stops, so a test knows a
	// request is parked there.
	waitingForBarrier func(method string, delta int)
	// beforeNodeStatus runs in nodes.Statuses.Set between reading the node's
	// evaluations and proposing its status change.
	beforeNodeStatus func(nodeID string)
	// beforePlan runs in a scheduler worker with the evaluation in hand,
	// after scheduling and before the plan is proposed; it must return
	// when ctx (the leadership) ends.
	beforePlan func(ctx context.Context, eval *pb.Evaluation)
	// proposing runs in raftApply once a command will be handed to raft
	// (it is encoded and its deadline has not passed), just before it is.
	proposing func(t fsm.MessageType)
	// beforeRestore runs on raft's FSM goroutine when a snapshot restore
	// reaches the state machine, before the store is replaced.
	beforeRestore func()
	// awaitingDuties runs when a restore starts waiting for the leader's
	// duties to run on st.
	awaitingDuties func(st *fsm.StateStore)
	// barrier runs when an endpoint asks for a barrier (core.Barrier),
	// before it is queued.
	barrier func()
	// beforeDeferredDecode runs before a snapshot raft installed is
	// decoded after Restore returned (fsm.DeferRestores).
	beforeDeferredDecode func()
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.Logger == nil {
		out.Logger = hclog.NewNullLogger()
	}
	if out.Clock == nil {
		out.Clock = clock.Real{}
	}
	if out.RetryInterval == 0 {
		out.RetryInterval = 5 * time.Second
	}
	if out.HeartbeatTTL == 0 {
		out.HeartbeatTTL = 10 * time.Second
	}
	if out.HeartbeatGrace == 0 {
		out.HeartbeatGrace = 10 * time.Second
	}
	if out.MaxHeartbeatsPerSecond == 0 {
		out.MaxHeartbeatsPerSecond = DefaultMaxHeartbeatsPerSecond
	}
	if out.BootstrapExpect == 0 {
		out.BootstrapExpect = 1
	}
	if out.RaftTimeoutScale == 0 {
		out.RaftTimeoutScale = 1
	}
	if out.Name == "" {
		out.Name = out.ID
	}
	if out.Version == "" {
		// The version every server records in state, which the table
		// rule's proposer check reads: a server that says none would hold
		// back every new command.
		out.Version = version.Version
	}
	if out.ForceDetachAfter <= 0 {
		out.ForceDetachAfter = volumeloops.DefaultForceDetachAfter
	}
	if out.VolumeReconcileInterval == 0 {
		out.VolumeReconcileInterval = volumeloops.DefaultReconcileInterval
	}
	if out.NumSchedulers <= 0 {
		out.NumSchedulers = defaultNumSchedulers()
	}
	return &out
}

func (c *Config) validate(opts options) error {
	var errs []error
	if c.RPCAddr == "" {
		errs = append(errs, errors.New("server config: rpc address is required"))
	}
	if err := endpoints.CheckEnforcement(c.NodeIdentityEnforcement); err != nil {
		errs = append(errs, fmt.Errorf("server config: %w", err))
	}
	if c.RaftAddr == "" && opts.raftTransport == nil {
		errs = append(errs, errors.New("server config: raft address is required"))
	}
	if c.BootstrapExpect < 1 {
		errs = append(errs, fmt.Errorf("server config: bootstrap_expect must be at least 1, got %d", c.BootstrapExpect))
	}
	if err := CheckRaftCommitTimeout(c.RaftCommitTimeout); c.RaftCommitTimeout != 0 && err != nil {
		errs = append(errs, fmt.Errorf("server config: raft_commit_timeout %w", err))
	}
	return errors.Join(errs...)
}

// raftConfig derives raft's configuration from c.
func (c *Config) raftConfig(id string) *raft.Config {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(id)
	rc.Logger = c.Logger.Named("raft")
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * c.RaftTimeoutScale) }
	rc.HeartbeatTimeout = scale(rc.HeartbeatTimeout)
	rc.ElectionTimeout = scale(rc.ElectionTimeout)
	rc.LeaderLeaseTimeout = leaderLease(rc.HeartbeatTimeout)
	rc.CommitTimeout = c.commitTimeout()
	if c.RaftSnapshotThreshold > 0 {
		rc.SnapshotThreshold = c.RaftSnapshotThreshold
	}
	if c.RaftSnapshotInterval > 0 {
		rc.SnapshotInterval = c.RaftSnapshotInterval
	}
	if c.RaftTrailingLogs > 0 {
		rc.TrailingLogs = c.RaftTrailingLogs
	}
	return rc
}
