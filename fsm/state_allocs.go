package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// AllocByID returns the allocation, or nil.
func (r reader) AllocByID(ws memdb.WatchSet, id string) (*pb.Allocation, error) {
	return allocsTable.first(r, ws, id)
}

// AllocsByJob returns the job's allocations sorted by ID, terminal ones
// included.
func (r reader) AllocsByJob(ws memdb.WatchSet, jobID string) ([]*pb.Allocation, error) {
	return allocsByJob.list(r, ws, jobID)
}

// AllocsByNode returns the node's allocations sorted by ID, terminal ones
// included. Its watch is on the node's range of the allocs' node index, so
// it wakes for any change to them, client updates included; a client that
// waits for what it must act on waits on NodeAllocsIndex instead.
func (r reader) AllocsByNode(ws memdb.WatchSet, nodeID string) ([]*pb.Allocation, error) {
	return allocsByNode.list(r, ws, nodeID)
}

// AllocsByEval returns the allocations an evaluation placed, sorted by ID.
func (r reader) AllocsByEval(ws memdb.WatchSet, evalID string) ([]*pb.Allocation, error) {
	return allocsByEval.list(r, ws, evalID)
}

// AllocsPage returns one page of allocations sorted by ID (see JobsPage).
func (r reader) AllocsPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Allocation) bool) (allocs []*pb.Allocation, next string, err error) {
	return pageByID(r, allocsTable, ws, from, limit, keep)
}

// NodeAllocsIndex returns the raft index of the last server-side change to
// the node's allocs: a placement, an in-place update, a stop or loss, a
// desired transition, a removal by GC. Client updates do not move it. The
// watch it adds to ws is on the node's one row of node_alloc_index, so a
// client's blocking query (minIndex = the index it last saw) sleeps until
// the servers change something it must act on, and is the one woken.
//
// A node with no such row (no alloc ever placed there, or its row
// collected with its last alloc) answers the allocs table's index, which
// is never below what the row said.
func (r reader) NodeAllocsIndex(ws memdb.WatchSet, nodeID string) (uint64, error) {
	row, err := nodeAllocIndexTable.first(r, ws, nodeID)
	if err != nil {
		return 0, err
	}
	if row != nil {
		return row.GetIndex(), nil
	}
	return r.Index(TableAllocs)
}

// GCCandidates returns, as a GC command to propose, what garbage collection
// may remove (the rules are in apply_gc.go): collectable allocs (but those
// holding a releasing claim on a live node) and
// terminal evals last modified before the raft index before, and stopped
// jobs last modified before it, an eval or job counted collectable when
// what keeps it is collected with it. At most limit of each (no limit when
// limit <= 0). The apply checks each again, so a candidate that changes
// before the command commits is kept.
func (r reader) GCCandidates(before uint64, limit int) (*pb.GCCommand, error) {
	// One point in time for every read below, even on a StateStore.
	r = reader{db: r.db.Snapshot(), schema: r.schema}
	cmd := &pb.GCCommand{}
	full := func(ids []string) bool { return limit > 0 && len(ids) >= limit }
	goingAllocs := map[string]bool{}
	err := allocsTable.primary.each(r.readTxn(), nil, nil, func(a *pb.Allocation) error {
		if full(cmd.AllocIds) || a.GetModifyIndex() >= before {
			return nil
		}
		ok, err := allocCollectable(r, a)
		if ok && err == nil {
			// Not proposed whatever the servers' versions (the apply
			// checks it only with keep_releasing_claims): proposing less
			// never makes servers diverge.
			var held bool
			held, err = holdsReleasingClaim(r, a)
			ok = !held
		}
		if ok && err == nil {
			cmd.AllocIds = append(cmd.AllocIds, a.GetId())
			goingAllocs[a.GetId()] = true
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	goingEvals := map[string]bool{}
	for _, s := range []pb.EvalStatus{pb.EvalStatus_EVAL_STATUS_COMPLETE, pb.EvalStatus_EVAL_STATUS_FAILED, pb.EvalStatus_EVAL_STATUS_CANCELED} {
		evals, err := r.EvalsByStatus(nil, s)
		if err != nil {
			return nil, err
		}
		for _, e := range evals {
			if full(cmd.EvalIds) || e.GetModifyIndex() >= before {
				continue
			}
			ok, err := evalCollectable(r, e, goingAllocs)
			if err != nil {
				return nil, err
			}
			if ok {
				cmd.EvalIds = append(cmd.EvalIds, e.GetId())
				goingEvals[e.GetId()] = true
			}
		}
	}
	err = jobsTable.primary.each(r.readTxn(), nil, nil, func(j *pb.Job) error {
		if full(cmd.JobIds) || !j.GetStop() || j.GetModifyIndex() >= before {
			return nil
		}
		ok, err := jobCollectable(r, j, goingAllocs, goingEvals)
		if ok {
			cmd.JobIds = append(cmd.JobIds, j.GetId())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return cmd, nil
}
