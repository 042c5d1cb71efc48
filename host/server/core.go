package server

import (
	"context"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/clientproxy"
	"berth.dev/berth/host/server/endpoints"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/host/server/nodes"
	"berth.dev/berth/host/server/volumeloops"
	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// core is the server as its parts see it (evals.Core and the like): the
// local state store, the leader's proposals and the table rule's version
// check. Each part declares the few of these it uses.
type core struct{ s *Server }

var (
	_ evals.Core                   = core{}
	_ nodes.Core                   = core{}
	_ volumeloops.Core             = core{}
	_ endpoints.Reader             = core{}
	_ endpoints.Proposer           = core{}
	_ endpoints.Cluster            = core{}
	_ endpoints.GarbageCollector   = core{}
	_ endpoints.Heartbeats         = (*nodes.Heartbeater)(nil)
	_ endpoints.Drainer            = (*nodes.Drainer)(nil)
	_ volumeloops.ControllerCaller = (*clientproxy.CSIForwarder)(nil)
)

// State returns the local state store.
func (c core) State() *fsm.StateStore { return c.s.fsm.State() }

// Apply proposes one command and waits until it is applied (raftApply).
func (c core) Apply(ctx context.Context, t fsm.MessageType, msg proto.Message) (uint64, error) {
	return c.s.raftApply(ctx, t, msg)
}

// ApplyResult is Apply for commands whose apply returns a value.
func (c core) ApplyResult(ctx context.Context, t fsm.MessageType, msg proto.Message) (*fsm.ApplyResult, error) {
	return c.s.raftApplyResult(ctx, t, msg)
}

// BlockingRead runs a (blocking, or consistent) query on the local state
// (blockingRead).
func (c core) BlockingRead(ctx context.Context, q *pb.QueryOptions, fn fsm.QueryFunc) (*pb.QueryMeta, error) {
	return c.s.blockingRead(ctx, q, fn)
}

// QueryMeta is the metadata of an answer read at index (queryMeta).
func (c core) QueryMeta(index uint64) *pb.QueryMeta { return c.s.queryMeta(index) }

// RaftServers lists the servers in raft's configuration (raftServers).
func (c core) RaftServers() ([]*pb.RaftServer, error) { return c.s.raftServers() }

// CollectGarbage runs the state's garbage collection (collectGarbage).
func (c core) CollectGarbage(ctx context.Context, force bool) (*pb.GCResponse, error) {
	return c.s.collectGarbage(ctx, force)
}

// RequireServersAt refuses while a server has not recorded a version
// satisfying v (requireServersAt).
func (c core) RequireServersAt(v versions.Constraint, since, what string) error {
	return c.s.requireServersAt(v, since, what)
}
