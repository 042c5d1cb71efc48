package fsm

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// applyAllocClientUpdate records what a client reports of its allocs, a
// batch at a time: client status and description, task states, and
// modified_at (the client's updated_at). It moves each alloc's modify
// index, never its alloc_modify_index: nothing here is for the client to
// act on, so the client's own blocking query sleeps through it.
//
// The node must be registered (ErrNodeNotFound), and every alloc reported
// that is stored must be on that node: one that is on another refuses the
// whole batch (ErrAllocNodeMismatch), since a client only runs its own. An
// alloc that is not stored is skipped: it was collected after the client
// queued its update (collection takes only allocs whose client status is
// terminal), and refusing it would refuse the rest of the batch forever.
//
// A terminal client status (complete, failed, lost) is final: a later
// report keeps it and its description, so an alloc never runs again after
// it finished and a lost alloc is not un-lost by a client that comes back
// (its allocs were replaced; the plan stops them there). Task states are
// still recorded, so the final task events of a lost alloc are kept. An
// update with no status (unspecified) changes only the task states.
//
// The command's evals (reschedules of failed allocs) are created, and the
// status of every job touched recomputed.
func applyAllocClientUpdate(tx *writeTxn, cmd *pb.AllocClientUpdateCommand) error {
	nodeID := cmd.GetNodeId()
	if nodeID == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return fmt.Errorf("client update of node %q: %w", nodeID, err)
	}
	node, err := nodesTable.first(tx, nil, nodeID)
	if err != nil {
		return err
	}
	if node == nil {
		return fmt.Errorf("client update of node %q: %w", nodeID, ErrNodeNotFound)
	}
	stored := make([]*pb.Allocation, len(cmd.GetUpdates()))
	for i, u := range cmd.GetUpdates() {
		if u.GetAllocId() == "" {
			return fmt.Errorf("%w: client update %d of %d of node %q names no alloc", ErrInvalidCommand, i+1, len(cmd.GetUpdates()), nodeID)
		}
		a, err := allocsTable.first(tx, nil, u.GetAllocId())
		if err != nil {
			return err
		}
		if a != nil && a.GetNodeId() != nodeID {
			return fmt.Errorf("node %q reported on alloc %q, which is on node %q: %w", nodeID, a.GetId(), a.GetNodeId(), ErrAllocNodeMismatch)
		}
		stored[i] = a
	}
	var jobs []string
	var touched []*pb.Allocation
	clientStopped := map[string]bool{}
	// written holds the rows this command wrote: two updates of one alloc
	// in a batch, the later builds on the earlier, as it would in
	// separate commands.
	written := make(map[string]*pb.Allocation, len(cmd.GetUpdates()))
	for i, u := range cmd.GetUpdates() {
		if stored[i] == nil {
			continue
		}
		touched = append(touched, stored[i])
		if rules.ClientStatusTerminal(u.GetClientStatus()) {
			clientStopped[u.GetAllocId()] = true
		}
		cur := stored[i]
		if w, ok := written[u.GetAllocId()]; ok {
			cur = w
		}
		a := clientUpdated(cur, u, tx.index)
		if err := allocsTable.replace(tx, cur, a); err != nil {
			return err
		}
		written[a.GetId()] = a
		jobs = addID(jobs, a.GetJobId())
	}
	if err := csiAllocsChanged(tx, touched); err != nil {
		return err
	}
	at, err := claimMoveTime(tx, latestUpdate(cmd.GetUpdates()), cmd.GetReceivedAt())
	if err != nil {
		return err
	}
	if err := claimsAllocsChanged(tx, allocIDs(touched), at, clientStopped); err != nil {
		return err
	}
	evalJobs, err := upsertEvals(tx, cmd.GetEvals())
	if err != nil {
		return err
	}
	for _, id := range evalJobs {
		jobs = addID(jobs, id)
	}
	return recomputeJobStatuses(tx, jobs)
}

// applyAllocDesiredTransition sets what the scheduler should do next with
// allocs (migrate off a draining node, reschedule now, stop without a
// replacement) and creates the evals that will. The transition replaces
// the alloc's previous one; it is a server-side change, so it moves the
// alloc_modify_index and wakes the alloc's node. Allocs that are not
// stored are skipped: collected since the drainer or the endpoint read
// them, they need no transition.
func applyAllocDesiredTransition(tx *writeTxn, cmd *pb.AllocDesiredTransitionCommand) error {
	if len(cmd.GetAllocs()) == 0 && len(cmd.GetEvals()) == 0 {
		return fmt.Errorf("%w: no allocs and no evals", ErrInvalidCommand)
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return err
	}
	// Sorted: map order must not decide the order of writes.
	ids := slices.Sorted(maps.Keys(cmd.GetAllocs()))
	if len(ids) > 0 && ids[0] == "" {
		return fmt.Errorf("%w: a desired transition names no alloc", ErrInvalidCommand)
	}
	var nodes []string
	for _, id := range ids {
		cur, err := allocsTable.first(tx, nil, id)
		if err != nil {
			return err
		}
		if cur == nil {
			continue
		}
		a := proto.Clone(cur).(*pb.Allocation)
		a.DesiredTransition = cmd.GetAllocs()[id]
		a.ModifiedAt = cmd.GetUpdatedAt()
		a.ModifyIndex = tx.index
		a.AllocModifyIndex = tx.index
		if err := allocsTable.insert(tx, a); err != nil {
			return err
		}
		nodes = addID(nodes, a.GetNodeId())
	}
	for _, n := range nodes {
		if err := touchNodeAllocs(tx, n); err != nil {
			return err
		}
	}
	jobs, err := upsertEvals(tx, cmd.GetEvals())
	if err != nil {
		return err
	}
	return recomputeJobStatuses(tx, jobs)
}

// allocIDs lists the IDs of allocs.
func allocIDs(allocs []*pb.Allocation) []string {
	ids := make([]string, len(allocs))
	for i, a := range allocs {
		ids[i] = a.GetId()
	}
	return ids
}

// latestUpdate is the latest updated_at of a client's updates: the time a
// claim released by them was modified.
func latestUpdate(updates []*pb.AllocClientUpdate) int64 {
	var at int64
	for _, u := range updates {
		at = max(at, u.GetUpdatedAt())
	}
	return at
}
