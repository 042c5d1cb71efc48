package endpoints

import (
	"context"
	"fmt"
	"sort"

	"berth.dev/berth/internal/rules"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/fsm"
	"berth.dev/berth/host/server/evals"
	"berth.dev/berth/internal/durations"
	"berth.dev/berth/rpc"
	"berth.dev/berth/rpc/pb"
)

// clientAllocsEndpoint is how a client learns what to run and reports how
// it goes.
type clientAllocsEndpoint struct {
	pb.UnimplementedClientAllocsServer
	s *api
}

// DefaultClientWatchBytes is the byte budget of a paged ClientAllocs.Watch
// answer: half the message limit, so the stubs, the rest of the answer and
// one alloc with the largest job admitted (jobspec.MaxJobBytesCeiling)
// always fit.
const DefaultClientWatchBytes = rpc.MaxMessageSize / 2

// JobKey is the key of a job version in ClientAllocsResponse.jobs.
func JobKey(jobID string, version uint64) string { return fmt.Sprintf("%s@%d", jobID, version) }

// Watch answers once something the client must act on changed: an alloc
// of the node placed, stopped, updated or removed by the servers (the
// node's allocs index passed min_index). Client status updates do not
// move that index and do not wake the query.
//
// An answer must fit the message limit however many jobs the node runs:
// an alloc the client holds unchanged, or has not run and that ended
// (client-terminal), is a stub; a job version the client holds (known_jobs) is not
// sent; and for a paged client the allocs in full and their jobs are held
// to a byte budget, the rest sent as stubs with more set, at least one
// alloc in full each time so every round moves on.
func (e *clientAllocsEndpoint) Watch(ctx context.Context, req *pb.ClientAllocsRequest) (*pb.ClientAllocsResponse, error) {
	nodeID := req.GetNodeId()
	if nodeID == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id: required")
	}
	known := req.GetKnown()
	knownJobs := make(map[string]bool, len(req.GetKnownJobs()))
	for _, k := range req.GetKnownJobs() {
		knownJobs[k] = true
	}
	budget := e.s.ClientWatchBytes
	resp := &pb.ClientAllocsResponse{}
	meta, err := e.s.BlockingRead(ctx, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) (uint64, error) {
		// The node's row of node_alloc_index moves with every change the
		// servers make to its allocs (placement, stop, transition,
		// removal) and never goes back, so it is both what the query
		// waits on and how a client tells a server behind it. The allocs
		// themselves are read without a watch: a client's own status
		// updates must not wake it.
		index, err := st.NodeAllocsIndex(ws, nodeID)
		if err != nil {
			return 0, err
		}
		allocs, err := st.AllocsByNode(nil, nodeID)
		if err != nil {
			return 0, err
		}
		sort.Slice(allocs, func(i, j int) bool { return allocs[i].GetId() < allocs[j].GetId() })
		resp.Allocs, resp.Jobs, resp.More = resp.Allocs[:0], map[string]*pb.Job{}, false
		var size, full int
		for _, a := range allocs {
			v, held := known[a.GetId()]
			// An alloc the client has not run and that stopped is still
			// sent in full until the client has reported it ended: the
			// client takes its claims off the node and reports it.
			stub := held && v == a.GetAllocModifyIndex()
			if !held && rules.AllocClientTerminal(a) {
				// Sent in full while a claim of it is still releasing on
				// the node (an alloc lost before its client ran it, its
				// node back in time): only the client takes it off.
				releasing, err := releasingClaimOn(st, a)
				if err != nil {
					return 0, err
				}
				stub = !releasing
			}
			if stub {
				resp.Allocs = append(resp.Allocs, allocStub(a))
				continue
			}
			key := JobKey(a.GetJobId(), a.GetJobVersion())
			var job *pb.Job
			if _, sent := resp.Jobs[key]; !sent && !knownJobs[key] {
				if job, err = st.JobVersion(nil, a.GetJobId(), a.GetJobVersion()); err != nil {
					return 0, err
				}
			}
			cost := proto.Size(a) + proto.Size(job)
			if req.GetPaged() && full > 0 && size+cost > budget {
				resp.Allocs = append(resp.Allocs, allocStub(a))
				resp.More = true
				continue
			}
			size += cost
			full++
			resp.Allocs = append(resp.Allocs, a)
			if job != nil {
				resp.Jobs[key] = job
			}
		}
		return nothingNewIndex(ws, index, req, resp), nil
	})
	if err != nil {
		return nil, err
	}
	resp.Meta = meta
	return resp, nil
}

// releasingClaimOn reports whether a claim of a is releasing on a's node.
func releasingClaimOn(st *fsm.StateSnapshot, a *pb.Allocation) (bool, error) {
	claims, err := st.ClaimsByAlloc(nil, a.GetId())
	if err != nil {
		return false, err
	}
	for _, c := range claims {
		if c.GetState() == pb.ClaimState_CLAIM_STATE_RELEASING && c.GetNodeId() == a.GetNodeId() {
			return true, nil
		}
	}
	return false, nil
}

// allocStub is how Watch sends an alloc the client is not to act on now:
// its ID and index.
func allocStub(a *pb.Allocation) *pb.Allocation {
	return &pb.Allocation{Id: a.GetId(), AllocModifyIndex: a.GetAllocModifyIndex()}
}

// Update records a batch of alloc statuses from one client, with an
// evaluation for each job whose alloc failed, so the scheduler replaces it
// per the group's reschedule policy.
func (e *clientAllocsEndpoint) Update(ctx context.Context, req *pb.ClientAllocUpdateRequest) (*pb.ClientAllocUpdateResponse, error) {
	s := e.s
	nodeID := req.GetNodeId()
	if nodeID == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id: required")
	}
	if len(req.GetUpdates()) == 0 {
		return &pb.ClientAllocUpdateResponse{Meta: &pb.WriteMeta{}}, nil
	}
	snap := s.State().Snapshot()
	var nodeEvals []*pb.Evaluation
	seen := map[string]bool{}
	for _, u := range req.GetUpdates() {
		if u.GetClientStatus() != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED {
			continue
		}
		a, err := snap.AllocByID(nil, u.GetAllocId())
		if err != nil {
			return nil, err
		}
		if a == nil || rules.AllocServerTerminal(a) || a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_FAILED || seen[a.GetJobId()] {
			continue
		}
		job, err := snap.JobByID(nil, a.GetJobId())
		if err != nil {
			return nil, err
		}
		if job == nil || job.GetType() == pb.JobType_JOB_TYPE_SYSTEM {
			continue
		}
		seen[a.GetJobId()] = true
		ev := evals.New(s.Clock.Now(), job, pb.EvalTrigger_EVAL_TRIGGER_ALLOC_FAILURE)
		ev.NodeId = nodeID
		nodeEvals = append(nodeEvals, ev)
	}
	// Proposed with the other nodes' updates waiting now, as one entry
	// (allocUpdateBatcher); refused or failed, this node's answer is its own.
	idx, err := s.allocUpdates.submit(ctx, &pb.AllocClientUpdateCommand{
		NodeId: nodeID, Updates: req.GetUpdates(), Evals: nodeEvals,
		// The claims' move to releasing is timed by this server's clock,
		// not the client's.
		ReceivedAt: s.Clock.Now().UnixNano(),
	})
	if err != nil {
		return nil, fmt.Errorf("recording %d alloc updates from node %s: %w", len(req.GetUpdates()), nodeID, err)
	}
	return &pb.ClientAllocUpdateResponse{Meta: &pb.WriteMeta{Index: idx}}, nil
}

// nodeOpsEndpoint changes nodes' scheduling.
type nodeOpsEndpoint struct {
	pb.UnimplementedNodeOpsServer
	s *api
}

func (e *nodeOpsEndpoint) node(id string) (*fsm.StateSnapshot, *pb.Node, error) {
	snap := e.s.State().Snapshot()
	n, err := snap.NodeByID(nil, id)
	if err != nil {
		return nil, nil, err
	}
	if n == nil {
		return nil, nil, fmt.Errorf("node %s: %w", id, fsm.ErrNodeNotFound)
	}
	return snap, n, nil
}

func (e *nodeOpsEndpoint) UpdateEligibility(ctx context.Context, req *pb.NodeEligibilityRequest) (*pb.NodeOpResponse, error) {
	s := e.s
	want := req.GetEligibility()
	if want != pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE && want != pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE {
		return nil, status.Errorf(codes.InvalidArgument, "node %s: eligibility must be eligible or ineligible, got %s", req.GetNodeId(), want)
	}
	snap, n, err := e.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	if n.GetDrain() != nil && want == pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s is draining; end the drain (node drain -disable) to make it eligible", n.GetId())
	}
	var nodeEvals []*pb.Evaluation
	if want == pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE {
		if nodeEvals, err = evals.ForNode(snap, s.Clock.Now(), n.GetId(), pb.EvalTrigger_EVAL_TRIGGER_NODE_ELIGIBILITY, true); err != nil {
			return nil, err
		}
	}
	idx, err := s.Apply(ctx, fsm.NodeEligibility, &pb.NodeEligibilityCommand{
		NodeId: n.GetId(), Eligibility: want, Evals: nodeEvals, UpdatedAt: s.Clock.Now().UnixNano(),
	})
	if err != nil {
		return nil, fmt.Errorf("setting node %s %s: %w", n.GetId(), want, err)
	}
	return &pb.NodeOpResponse{EvalIds: evalIDs(nodeEvals), Meta: &pb.WriteMeta{Index: idx}}, nil
}

func (e *nodeOpsEndpoint) UpdateDrain(ctx context.Context, req *pb.NodeDrainRequest) (*pb.NodeOpResponse, error) {
	s := e.s
	snap, n, err := e.node(req.GetNodeId())
	if err != nil {
		return nil, err
	}
	now := s.Clock.Now()
	cmd := &pb.NodeDrainCommand{NodeId: n.GetId(), MarkEligible: req.GetMarkEligible(), UpdatedAt: now.UnixNano()}
	if d := req.GetDrain(); d != nil {
		if ms := d.GetDeadlineMs(); ms < -1 || ms > durations.MaxMs {
			return nil, status.Errorf(codes.InvalidArgument, "node %s: drain deadline_ms must be -1 (force), 0 (none) or positive up to %d (%s), got %d", n.GetId(), durations.MaxMs, durations.Max, ms)
		}
		strategy := &pb.DrainStrategy{DeadlineMs: d.GetDeadlineMs(), IgnoreSystemJobs: d.GetIgnoreSystemJobs(), StartedAt: now.UnixNano()}
		if old := n.GetDrain(); old != nil {
			strategy.StartedAt = old.GetStartedAt()
		}
		switch {
		case d.GetDeadlineMs() < 0:
			strategy.ForceDeadlineAt = now.UnixNano()
		case d.GetDeadlineMs() > 0:
			strategy.ForceDeadlineAt = durations.AddMs(now.UnixNano(), d.GetDeadlineMs())
		}
		cmd.Drain = strategy
	} else if req.GetMarkEligible() {
		if cmd.Evals, err = evals.ForNode(snap, s.Clock.Now(), n.GetId(), pb.EvalTrigger_EVAL_TRIGGER_NODE_ELIGIBILITY, true); err != nil {
			return nil, err
		}
	}
	idx, err := s.Apply(ctx, fsm.NodeDrain, cmd)
	if err != nil {
		return nil, fmt.Errorf("updating the drain of node %s: %w", n.GetId(), err)
	}
	s.Drainer.Kick()
	return &pb.NodeOpResponse{EvalIds: evalIDs(cmd.GetEvals()), Meta: &pb.WriteMeta{Index: idx}}, nil
}

// Allocations lists a node's allocs. An unknown node is NotFound, not an
// empty list: a node is known while it is registered or any alloc placed
// on it is left.
func (e *nodeOpsEndpoint) Allocations(ctx context.Context, req *pb.NodeAllocationsRequest) (*pb.AllocListResponse, error) {
	var known bool
	resp, err := allocList(ctx, e.s, req.GetQuery(), func(ws memdb.WatchSet, st *fsm.StateSnapshot) ([]*pb.Allocation, error) {
		allocs, err := st.AllocsByNode(ws, req.GetNodeId())
		if err != nil || len(allocs) > 0 {
			known = true
			return allocs, err
		}
		n, err := st.NodeByID(ws, req.GetNodeId())
		known = n != nil
		return allocs, err
	})
	if err == nil && !known {
		err = fmt.Errorf("node %s: %w", req.GetNodeId(), fsm.ErrNodeNotFound)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func evalIDs(evals []*pb.Evaluation) []string {
	ids := make([]string, 0, len(evals))
	for _, e := range evals {
		ids = append(ids, e.GetId())
	}
	return ids
}

// systemEndpoint runs cluster maintenance.
type systemEndpoint struct {
	pb.UnimplementedSystemServer
	s *api
}

func (e *systemEndpoint) GarbageCollect(ctx context.Context, _ *pb.GCRequest) (*pb.GCResponse, error) {
	return e.s.GC.CollectGarbage(ctx, true)
}
