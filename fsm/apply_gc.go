package fsm

import (
	"fmt"
	"slices"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// Garbage collection removes what nothing live needs any more. The leader
// picks candidates from a snapshot (GCCandidates) and proposes a GC
// command; the apply removes only what is still collectable then, by the
// rules below, so a candidate that came back to life in between (an eval
// that placed a new alloc, a job registered again) is kept.
//
//   - An alloc is collectable when its client is done with it (client
//     status complete, failed or lost) and the servers are too: it was
//     stopped or evicted, or replaced (next_allocation set), or its job is
//     gone or stopped; and its follow-up eval, if any, is terminal or gone.
//     A complete batch alloc of a live job stays (it tells the scheduler
//     not to run it again), and so does a failed alloc not yet replaced
//     (the scheduler reschedules from it).
//   - An eval is collectable when it is terminal (complete, failed,
//     canceled) and every alloc it placed (eval_id) is gone or collected
//     by the same command.
//   - A job is collectable when it is stopped and nothing of it is left:
//     no allocs, no evals (allocs and evals collected by the same command
//     count as gone). Its versions go with it. A job ID that names no job
//     removes the versions a purge left, if any.
//
//   - With keep_releasing_claims (set once every server knows the rule),
//     an alloc holding a releasing claim on a node neither down, fenced
//     nor gone is kept until its client reports the claim off the node.
//
// Allocs are removed first, then evals, then jobs, so one command can take
// a job with its evals and allocs.

// applyGC removes the allocs, evals and jobs of the command that are still
// collectable; the others, and IDs not stored, are skipped. Removing
// allocs touches their nodes' alloc index (NodeAllocsIndex), or drops it
// for a node that is deregistered and has no allocs left.
func applyGC(tx *writeTxn, cmd *pb.GCCommand) error {
	for _, ids := range [][]string{cmd.GetAllocIds(), cmd.GetEvalIds(), cmd.GetJobIds()} {
		if slices.Contains(ids, "") {
			return fmt.Errorf("%w: an empty ID to collect", ErrInvalidCommand)
		}
	}
	var nodes, jobs []string
	var removed []*pb.Allocation
	for _, id := range cmd.GetAllocIds() {
		a, err := allocsTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if a == nil {
			continue
		}
		ok, err := allocCollectable(tx, a)
		if err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		if cmd.GetKeepReleasingClaims() {
			held, err := holdsReleasingClaim(tx, a)
			if err != nil {
				return err
			}
			if held {
				continue
			}
		}
		if err := allocsTable.delete(tx, a); err != nil {
			return err
		}
		nodes = addID(nodes, a.GetNodeId())
		jobs = addID(jobs, a.GetJobId())
		removed = append(removed, a)
	}
	if err := csiAllocsChanged(tx, removed); err != nil {
		return err
	}
	// GC removes only client-terminal allocs, whose claims the apply that
	// made them terminal moved on already; a removed alloc's claim must
	// never stay live, so this is the last guard.
	at, err := claimMoveTime(tx, 0, cmd.GetCollectedAt())
	if err != nil {
		return err
	}
	if err := claimsAllocsChanged(tx, allocIDs(removed), at, nil); err != nil {
		return err
	}
	for _, id := range cmd.GetEvalIds() {
		e, err := evalsTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if e == nil {
			continue
		}
		ok, err := evalCollectable(tx, e, nil)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := evalsTable.delete(tx, e); err != nil {
			return err
		}
		jobs = addID(jobs, e.GetJobId())
	}
	for _, id := range cmd.GetJobIds() {
		j, err := jobsTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if j != nil {
			ok, err := jobCollectable(tx, j, nil, nil)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := jobsTable.delete(tx, j); err != nil {
				return err
			}
		}
		versions, err := jobVersionsTable.list(tx, nil, id)
		if err != nil {
			return err
		}
		for _, v := range versions {
			if err := jobVersionsTable.delete(tx, v); err != nil {
				return err
			}
		}
	}
	for _, n := range nodes {
		if err := gcNodeAllocIndex(tx, n); err != nil {
			return err
		}
	}
	return recomputeJobStatuses(tx, jobs)
}

// gcNodeAllocIndex records that allocs of the node were removed, or drops
// the node's alloc index when the node is deregistered and has no allocs
// left (no client watches it; NodeAllocsIndex then answers the allocs
// table's index, which is at least as high).
func gcNodeAllocIndex(tx *writeTxn, nodeID string) error {
	node, err := nodesTable.first(tx, nil, nodeID)
	if err != nil {
		return err
	}
	if node == nil {
		left, err := allocsByNode.first(tx, nil, nodeID)
		if err != nil {
			return err
		}
		if left == nil {
			row, err := nodeAllocIndexTable.first(tx, nil, nodeID)
			if err != nil || row == nil {
				return err
			}
			return nodeAllocIndexTable.delete(tx, row)
		}
	}
	return touchNodeAllocs(tx, nodeID)
}

// allocCollectable reports whether the alloc may be removed (see the
// rules above).
func allocCollectable(src txnSource, a *pb.Allocation) (bool, error) {
	if !rules.AllocClientTerminal(a) {
		return false, nil
	}
	if f := a.GetFollowupEvalId(); f != "" {
		e, err := evalsTable.first(src, nil, f)
		if err != nil {
			return false, err
		}
		if e != nil && !EvalTerminal(e) {
			return false, nil
		}
	}
	if rules.AllocServerTerminal(a) || a.GetNextAllocation() != "" {
		return true, nil
	}
	job, err := jobsTable.first(src, nil, a.GetJobId())
	if err != nil {
		return false, err
	}
	return job == nil || job.GetStop(), nil
}

// holdsReleasingClaim reports whether the alloc holds a releasing claim on
// a node neither down, nor fenced, nor gone: only its client reports such
// a claim off the node, and only while the servers send it the alloc.
func holdsReleasingClaim(src txnSource, a *pb.Allocation) (bool, error) {
	claims, err := claimsByAlloc.list(src, nil, a.GetId())
	if err != nil {
		return false, err
	}
	for _, c := range claims {
		if c.GetState() != pb.ClaimState_CLAIM_STATE_RELEASING {
			continue
		}
		n, err := nodesTable.first(src, nil, c.GetNodeId())
		if err != nil {
			return false, err
		}
		if n != nil && n.GetStatus() != pb.NodeStatus_NODE_STATUS_DOWN && !n.GetFenced() {
			return true, nil
		}
	}
	return false, nil
}

// evalCollectable reports whether the eval may be removed: terminal, and
// every alloc it placed gone or in goingAllocs (collected with it).
func evalCollectable(src txnSource, e *pb.Evaluation, goingAllocs map[string]bool) (bool, error) {
	if !EvalTerminal(e) {
		return false, nil
	}
	allocs, err := allocsByEval.list(src, nil, e.GetId())
	if err != nil {
		return false, err
	}
	for _, a := range allocs {
		if !goingAllocs[a.GetId()] {
			return false, nil
		}
	}
	return true, nil
}

// jobCollectable reports whether the job may be removed: stopped, and
// every alloc and eval of it gone or in goingAllocs and goingEvals.
func jobCollectable(src txnSource, j *pb.Job, goingAllocs, goingEvals map[string]bool) (bool, error) {
	if !j.GetStop() {
		return false, nil
	}
	allocs, err := allocsByJob.list(src, nil, j.GetId())
	if err != nil {
		return false, err
	}
	for _, a := range allocs {
		if !goingAllocs[a.GetId()] {
			return false, nil
		}
	}
	evals, err := evalsByJob.list(src, nil, j.GetId())
	if err != nil {
		return false, err
	}
	for _, e := range evals {
		if !goingEvals[e.GetId()] {
			return false, nil
		}
	}
	return true, nil
}
