package endpoints

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/authz"
	"berth.dev/berth/host/jobspec"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/clock"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// Reader reads the replicated state: the local store, a (blocking or
// consistent) query on it, and the metadata of an answer at an index.
type Reader interface {
	State() *fsm.StateStore
	BlockingRead(ctx context.Context, q *pb.QueryOptions, fn fsm.QueryFunc) (*pb.QueryMeta, error)
	QueryMeta(index uint64) *pb.QueryMeta
}

// Proposer proposes commands through raft (the leader's; followers forward
// writes before they reach an endpoint).
type Proposer interface {
	Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error)
	ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error)
	// Barrier returns once every command committed before the call is
	// applied to the local state: the leader applies a commit after the
	// followers may have, so a client that read a follower can ask the
	// leader about a row the leader has not applied yet.
	Barrier(ctx context.Context) error
}

// Cluster is what the endpoints ask of the servers: the table rule's check
// that every server is new enough for a command, and the servers in raft's
// configuration.
type Cluster interface {
	RequireServersAt(c versions.Constraint, since, what string) error
	RaftServers() ([]*pb.RaftServer, error)
}

// Heartbeats are the leader's heartbeat timers (nodes.Heartbeater).
type Heartbeats interface {
	Reset(nodeID string, d time.Duration)
	Heartbeat(ctx context.Context, nodeID string, d time.Duration) error
	// TTL is the TTL to tell a node now (it grows with the nodes).
	TTL() time.Duration
}

// Drainer is the leader's drainer (nodes.Drainer), woken when a drain is
// set.
type Drainer interface{ Kick() }

// GarbageCollector runs the state's garbage collection on request.
type GarbageCollector interface {
	CollectGarbage(ctx context.Context, force bool) (*pb.GCResponse, error)
}

// Deps is what the endpoints need of the server: its parts, each through
// the small interface above, and its settings.
type Deps struct {
	Reader
	Proposer
	Cluster
	Heartbeats Heartbeats
	Drainer    Drainer
	GC         GarbageCollector
	// Calls makes the volume endpoints' CSI controller calls.
	Calls volumeloops.ControllerCaller
	// NodeCalls makes the volume endpoints' node expansions.
	NodeCalls NodeExpander

	Clock  clock.Clock
	Logger hclog.Logger
	// JobLimits bounds what one job may ask for.
	JobLimits jobspec.Limits
	// HeartbeatTTL is the shortest TTL nodes are told to heartbeat
	// within; Heartbeats.TTL scales it with the nodes.
	HeartbeatTTL time.Duration
	// ClientWatchBytes is the byte budget of a paged ClientAllocs.Watch
	// answer's allocs and jobs; zero means DefaultClientWatchBytes.
	ClientWatchBytes int
	// Detacher makes Volumes.Detach's node calls (nil: refused).
	Detacher NodeDetacher
	// HostVolumeCalls makes HostVolumes' node calls (nil: refused).
	HostVolumeCalls HostVolumeNodeCaller
	// ACL resolves tokens (ACL.Authorize, TokenSelf); ACLEnabled says
	// whether the servers enforce them; ACLResetFile is where the ACL
	// bootstrap reads a reset index ("" for none).
	ACL          *authz.Resolver
	ACLEnabled   bool
	ACLResetFile string
	// NodeIdentity is the node identity enforcement (nil: warn, unlogged).
	NodeIdentity *NodeIdentity
}

// Hooks hold the endpoints where a test would otherwise depend on timing.
// Production servers pass none.
type Hooks struct {
	// LostRace is called after a volume create's register was refused for
	// a volume registered under the ID during the plugin's call, before
	// that volume is read.
	LostRace func(volumeID string)
}

// api is what every endpoint holds: the server's parts and settings.
type api struct {
	Deps
	// drivers is the drivers' task schemas job registers check against.
	drivers driverSchemas
	// allocUpdates batches ClientAllocs.Update calls into raft entries.
	allocUpdates *allocUpdateBatcher
}

// Set is the server's RPC endpoints, one per gRPC service.
type Set struct {
	Allocs       pb.AllocsServer
	Evals        pb.EvalsServer
	Jobs         pb.JobsServer
	Nodes        pb.NodesServer
	NodeOps      pb.NodeOpsServer
	ClientAllocs pb.ClientAllocsServer
	System       pb.SystemServer
	CSIPlugins   pb.CSIPluginsServer
	Volumes      pb.VolumesServer
	Claims       pb.ClaimsServer
	HostVolumes  pb.HostVolumesServer
	ACL          pb.ACLServer
}

// New returns the endpoints over deps.
func New(deps Deps, hooks Hooks) *Set {
	if deps.ClientWatchBytes <= 0 {
		deps.ClientWatchBytes = DefaultClientWatchBytes
	}
	s := &api{Deps: deps}
	s.allocUpdates = newAllocUpdateBatcher(deps)
	return &Set{
		Allocs:       &allocsEndpoint{s: s},
		Evals:        &evalsEndpoint{s: s},
		Jobs:         &jobsEndpoint{s: s},
		Nodes:        &nodesEndpoint{s: s},
		NodeOps:      &nodeOpsEndpoint{s: s},
		ClientAllocs: &clientAllocsEndpoint{s: s},
		System:       &systemEndpoint{s: s},
		CSIPlugins:   &csiPluginsEndpoint{s: s},
		Volumes:      &volumesEndpoint{s: s, calls: deps.Calls, nodes: deps.NodeCalls, lostRace: hooks.LostRace, detacher: deps.Detacher},
		Claims:       &claimsEndpoint{s: s},
		HostVolumes:  &hostVolumesEndpoint{s: s, calls: deps.HostVolumeCalls},
		ACL:          &aclEndpoint{s: s},
	}
}

// Register registers every endpoint on g.
func (set *Set) Register(g grpc.ServiceRegistrar) {
	pb.RegisterAllocsServer(g, set.Allocs)
	pb.RegisterEvalsServer(g, set.Evals)
	pb.RegisterJobsServer(g, set.Jobs)
	pb.RegisterNodesServer(g, set.Nodes)
	pb.RegisterNodeOpsServer(g, set.NodeOps)
	pb.RegisterClientAllocsServer(g, set.ClientAllocs)
	pb.RegisterSystemServer(g, set.System)
	pb.RegisterCSIPluginsServer(g, set.CSIPlugins)
	pb.RegisterVolumesServer(g, set.Volumes)
	pb.RegisterClaimsServer(g, set.Claims)
	pb.RegisterHostVolumesServer(g, set.HostVolumes)
	pb.RegisterACLServer(g, set.ACL)
}
