package fsm

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// applyPlanApply applies a scheduler's plan: the last word on placements.
// The scheduler planned from a snapshot; this re-checks every node the
// plan touches against the state of the apply itself, which includes
// every command applied earlier in the same raft batch (a node marked
// down one entry earlier refuses the plan's placements on it).
//
// Refused as a whole, writing nothing: a plan with no job ID, an alloc
// without ID or node, for another job, listed twice, both stopped and
// placed, or moved to another node by an in-place update
// (ErrInvalidCommand); a plan placing or updating allocs of a job that is
// not stored, purged since the scheduler read it (ErrJobNotFound: a purged
// job's plan may only stop its allocs); an alloc running a version of the
// job that job_versions does not hold (ErrJobVersionNotFound); with
// refuse_unseen_history, a plan whose snapshot_index is above the store's
// latest index (ErrPlanUnseenHistory: made before a snapshot restore
// replaced the state, from a history the restored state never had).
//
// Otherwise the plan is applied node by node, as Nomad applies it. A node
// with placements or in-place updates (plan.allocs) refuses them, and then
// its stops too, when:
//
//   - it is not registered;
//   - a new placement is on it and it is not rules.NodeSchedulable (ready,
//     eligible, not draining, not fenced);
//   - only in-place updates are on it and it is down (an update of a
//     running alloc needs its node up, not eligible: a draining node's
//     allocs are still updated in place until the drain moves them);
//   - the allocs it would hold do not fit (rules.AllocsFit over its allocs that
//     are not terminal, less those the plan stops or updates there, plus
//     the plan's allocs there), naming the dimension that ran out.
//
// A node with only stops never refuses: stopping an alloc, or marking it
// lost, is what a down or deregistered node needs. A stop of an alloc that
// is gone (collected) is skipped. With all_at_once one refusing node
// refuses every node. The evals (the worker's eval update, follow-ups,
// blocked evals) are upserted only when no node refused, so a refused plan
// leaves its eval to be planned again.
//
// The plan's volume claims are reserved with their node's part
// (apply_plan_claims.go): a node whose claims do not fit refuses, naming
// volume, alloc and node. Stopped allocs' claims move to releasing.
//
// The answer, in ApplyResult.Response, is a *pb.PlanResult: the refused
// nodes (sorted) with a reason each, and what was applied.
func applyPlanApply(tx *writeTxn, cmd *pb.PlanApplyCommand) error {
	plan := cmd.GetPlan()
	if plan == nil {
		return fmt.Errorf("%w: no plan", ErrInvalidCommand)
	}
	if plan.GetJobId() == "" {
		return fmt.Errorf("%w: plan of eval %q has no job ID", ErrInvalidCommand, plan.GetEvalId())
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return fmt.Errorf("plan of eval %q: %w", plan.GetEvalId(), err)
	}
	if cmd.GetRefuseUnseenHistory() {
		// Every store's latest index only grows, and a plan is made from
		// the proposer's store, so a plan above this one's latest index
		// saw a state it never held: one a snapshot restore replaced.
		latest, err := tx.latestIndex()
		if err != nil {
			return err
		}
		if plan.GetSnapshotIndex() > latest {
			return fmt.Errorf("plan of eval %q was made from the state at index %d, above this state's latest index %d (a snapshot restore replaced it): %w",
				plan.GetEvalId(), plan.GetSnapshotIndex(), latest, ErrPlanUnseenHistory)
		}
	}
	// A purged job's plan may still stop its allocs (that is how `job stop
	// -purge` stops them), but may place nothing.
	job, err := jobsTable.first(tx, nil, plan.GetJobId())
	if err != nil {
		return err
	}
	if job == nil && len(plan.GetAllocs()) > 0 {
		return fmt.Errorf("plan of eval %q places allocs of job %q: %w", plan.GetEvalId(), plan.GetJobId(), ErrJobNotFound)
	}
	nodes, err := planByNode(tx, plan)
	if err != nil {
		return fmt.Errorf("plan of eval %q: %w", plan.GetEvalId(), err)
	}
	if err := planClaims(tx, plan, nodes); err != nil {
		return fmt.Errorf("plan of eval %q: %w", plan.GetEvalId(), err)
	}

	result := &pb.PlanResult{Index: tx.index}
	var firstRefused string
	// accepted holds the claims of the nodes that took their part so far:
	// a later node's claims are checked against them too.
	var accepted []*pb.Claim
	for _, pn := range nodes {
		reason, err := checkPlanNode(tx, pn)
		if err != nil {
			return err
		}
		if reason == "" {
			if reason, err = checkPlanClaims(tx, pn, accepted); err != nil {
				return err
			}
		}
		if reason == "" {
			for _, r := range pn.claims {
				accepted = append(accepted, r.claim)
			}
		}
		if reason != "" {
			pn.refusal = reason
			if firstRefused == "" {
				firstRefused = pn.id
			}
		}
	}
	if firstRefused != "" && plan.GetAllAtOnce() {
		for _, pn := range nodes {
			if pn.refusal == "" {
				pn.refusal = fmt.Sprintf("plan is all at once and node %q refused", firstRefused)
			}
		}
	}

	// Apply every stop before any placement, so a placement replacing an
	// alloc stopped by the same plan links to the stopped version.
	appliedAt := cmd.GetAppliedAt()
	jobs := []string{plan.GetJobId()}
	var touched []*pb.Allocation
	var stopped []string
	// live is the plan's job once one of its allocs is stored and not
	// terminal: its status is then running without a scan.
	var live string
	for _, pn := range nodes {
		if pn.refusal != "" {
			if result.Refusals == nil {
				result.Refusals = map[string]string{}
			}
			result.RefusedNodes = append(result.RefusedNodes, pn.id)
			result.Refusals[pn.id] = pn.refusal
			continue
		}
		for _, s := range pn.stops {
			if err := applyAllocStop(tx, s.stop, s.alloc, appliedAt); err != nil {
				return err
			}
			result.AppliedStops++
			jobs = addID(jobs, s.alloc.GetJobId())
			touched = append(touched, s.alloc)
			stopped = append(stopped, s.alloc.GetId())
		}
	}
	if err := claimsAllocsChanged(tx, stopped, appliedAt, nil); err != nil {
		return err
	}
	for _, pn := range nodes {
		if pn.refusal != "" {
			continue
		}
		for i, a := range pn.allocs {
			before := pn.existing[i]
			if before == nil {
				before = a
			}
			touched = append(touched, before)
			if err := applyPlacement(tx, a, pn.existing[i], appliedAt); err != nil {
				return err
			}
			if !rules.AllocTerminal(a) {
				live = plan.GetJobId()
			}
			result.AppliedAllocs++
		}
		for _, r := range pn.claims {
			if err := r.store(tx, appliedAt); err != nil {
				return err
			}
			result.AppliedClaims++
		}
		if err := touchNodeAllocs(tx, pn.id); err != nil {
			return err
		}
	}
	slices.Sort(result.RefusedNodes)
	if err := csiAllocsChanged(tx, touched); err != nil {
		return err
	}

	if len(result.RefusedNodes) == 0 {
		evalJobs, err := upsertEvals(tx, cmd.GetEvals())
		if err != nil {
			return err
		}
		for _, id := range evalJobs {
			jobs = addID(jobs, id)
		}
	}
	if err := recomputeJobStatusesLive(tx, jobs, live); err != nil {
		return err
	}
	tx.result = result
	return nil
}

// planNode is what a plan does to one node.
type planNode struct {
	id string
	// allocs are the plan's placements and in-place updates on the node;
	// existing[i] is the stored alloc allocs[i] updates, nil for a new one.
	allocs   []*pb.Allocation
	existing []*pb.Allocation
	// placements counts the new allocs.
	placements int
	stops      []planStop
	// claims are the new claims of the node's placements and updates,
	// with their checks (checkPlanClaims fills in the reservations).
	claims []*reservation
	// refusal is why the node refused the plan, "" when it took it.
	refusal string
}

type planStop struct {
	stop  *pb.AllocStop
	alloc *pb.Allocation
}

// planByNode checks the plan's allocs and stops and groups them by node,
// in the order the plan first names each node.
func planByNode(tx *writeTxn, plan *pb.Plan) ([]*planNode, error) {
	var nodes []*planNode
	byID := map[string]*planNode{}
	node := func(id string) *planNode {
		pn := byID[id]
		if pn == nil {
			pn = &planNode{id: id}
			byID[id] = pn
			nodes = append(nodes, pn)
		}
		return pn
	}
	ids := make(map[string]bool, len(plan.GetAllocs())+len(plan.GetStops()))
	for _, s := range plan.GetStops() {
		id := s.GetAllocId()
		if id == "" {
			return nil, fmt.Errorf("%w: a stop names no alloc", ErrInvalidCommand)
		}
		if ids[id] {
			return nil, fmt.Errorf("%w: alloc %q is stopped twice", ErrInvalidCommand, id)
		}
		ids[id] = true
		a, err := allocsTable.first(tx, nil, id)
		if err != nil {
			return nil, err
		}
		if a == nil {
			continue // collected since the scheduler read it: nothing to stop
		}
		pn := node(a.GetNodeId())
		pn.stops = append(pn.stops, planStop{stop: s, alloc: a})
	}
	var versions []uint64
	for i, a := range plan.GetAllocs() {
		id := a.GetId()
		switch {
		case id == "":
			return nil, fmt.Errorf("%w: alloc %d of %d (%s) has no ID", ErrInvalidCommand, i+1, len(plan.GetAllocs()), a.GetName())
		case a.GetNodeId() == "":
			return nil, fmt.Errorf("%w: alloc %q has no node", ErrInvalidCommand, id)
		case a.GetJobId() != plan.GetJobId():
			return nil, fmt.Errorf("%w: alloc %q is for job %q, the plan for job %q", ErrInvalidCommand, id, a.GetJobId(), plan.GetJobId())
		case ids[id]:
			return nil, fmt.Errorf("%w: alloc %q is listed twice, or both placed and stopped", ErrInvalidCommand, id)
		}
		ids[id] = true
		if !slices.Contains(versions, a.GetJobVersion()) {
			v, err := jobVersionsTable.first(tx, nil, a.GetJobId(), versionKey(a.GetJobVersion()))
			if err != nil {
				return nil, err
			}
			if v == nil {
				return nil, fmt.Errorf("alloc %q runs version %d of job %q, which is not stored: %w",
					id, a.GetJobVersion(), a.GetJobId(), ErrJobVersionNotFound)
			}
			versions = append(versions, a.GetJobVersion())
		}
		existing, err := allocsTable.first(tx, nil, id)
		if err != nil {
			return nil, err
		}
		if existing != nil && (existing.GetNodeId() != a.GetNodeId() || existing.GetJobId() != a.GetJobId()) {
			return nil, fmt.Errorf("%w: alloc %q of job %q on node %q cannot be updated in place to job %q on node %q",
				ErrInvalidCommand, id, existing.GetJobId(), existing.GetNodeId(), a.GetJobId(), a.GetNodeId())
		}
		if a.GetDesiredStatus() == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_UNSPECIFIED {
			a.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_RUN
		}
		pn := node(a.GetNodeId())
		pn.allocs = append(pn.allocs, a)
		pn.existing = append(pn.existing, existing)
		if existing == nil {
			pn.placements++
		}
	}
	return nodes, nil
}

// checkPlanNode returns why the node refuses its part of the plan, "" if
// it takes it (see applyPlanApply for the rules).
func checkPlanNode(tx *writeTxn, pn *planNode) (string, error) {
	if len(pn.allocs) == 0 {
		return "", nil
	}
	node, err := nodesTable.first(tx, nil, pn.id)
	if err != nil {
		return "", err
	}
	switch {
	case node == nil:
		return fmt.Sprintf("node %q is not registered", pn.id), nil
	case pn.placements > 0 && node.GetStatus() != pb.NodeStatus_NODE_STATUS_READY:
		return fmt.Sprintf("node %q is %s, not ready for placements", pn.id, nodeStatusWord(node.GetStatus())), nil
	case pn.placements > 0 && node.GetDrain() != nil:
		return fmt.Sprintf("node %q is draining", pn.id), nil
	case pn.placements > 0 && node.GetFenced():
		return fmt.Sprintf("node %q is fenced", pn.id), nil
	case pn.placements > 0 && !rules.NodeSchedulable(node):
		return fmt.Sprintf("node %q is ineligible for placements", pn.id), nil
	case node.GetStatus() == pb.NodeStatus_NODE_STATUS_DOWN:
		return fmt.Sprintf("node %q is down: its allocs cannot be updated in place", pn.id), nil
	}
	// rules.AllocsFit over the node's allocs less those the plan replaces, plus
	// the plan's: the node's row in node_usage is the sum over its allocs,
	// so the ones the plan stops or updates there are counted out of it.
	usage, err := nodeUsageTable.first(tx, nil, pn.id)
	if err != nil {
		return "", err
	}
	used := rules.Usage{CPU: usage.GetCpuMhz(), Mem: usage.GetMemoryMb()}
	for _, s := range pn.stops {
		used.Remove(s.alloc)
	}
	for _, e := range pn.existing {
		if e != nil {
			used.Remove(e)
		}
	}
	for _, a := range pn.allocs {
		used.Add(a)
	}
	ok, dim, cpu, mem := used.Fits(node)
	if ok {
		return "", nil
	}
	capCPU, capMem := rules.NodeCapacity(node)
	if dim == rules.DimensionCPU {
		return fmt.Sprintf("node %q: %s exhausted: its allocs would need %d MHz of %d", pn.id, dim, cpu, capCPU), nil
	}
	return fmt.Sprintf("node %q: %s exhausted: its allocs would need %d MB of %d", pn.id, dim, mem, capMem), nil
}

// nodeStatusWord is a node status as the API writes it; one this version
// does not know reads "in status 7".
func nodeStatusWord(s pb.NodeStatus) string {
	if w, ok := pb.EnumValueWord(s.Descriptor(), s.Number()); ok {
		return w
	}
	return fmt.Sprintf("in status %d", int32(s))
}

// applyAllocStop stops a (stored) alloc as the plan's stop says: desired
// status (stop when unspecified) and description, the follow-up eval, and
// a client status such as lost, which never replaces a terminal one (an
// alloc that completed before its node went down stays complete).
func applyAllocStop(tx *writeTxn, s *pb.AllocStop, stored *pb.Allocation, appliedAt int64) error {
	a := proto.Clone(stored).(*pb.Allocation)
	a.DesiredStatus = s.GetDesiredStatus()
	if a.DesiredStatus == pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_UNSPECIFIED {
		a.DesiredStatus = pb.AllocDesiredStatus_ALLOC_DESIRED_STATUS_STOP
	}
	a.DesiredDescription = s.GetDesiredDescription()
	if cs := s.GetClientStatus(); cs != pb.AllocClientStatus_ALLOC_CLIENT_STATUS_UNSPECIFIED && !rules.AllocClientTerminal(stored) {
		a.ClientStatus = cs
		if cs == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_LOST {
			a.ClientDescription = fmt.Sprintf("alloc is lost: node %q is down", a.GetNodeId())
		}
	}
	if f := s.GetFollowupEvalId(); f != "" {
		a.FollowupEvalId = f
	}
	a.ModifyIndex = tx.index
	a.AllocModifyIndex = tx.index
	a.ModifiedAt = appliedAt
	return allocsTable.insert(tx, a)
}

// applyPlacement stores a placement (existing nil) or an in-place update.
// A placement starts pending, created now; an update keeps the create
// index and time, what the client owns (client status and description,
// task states) and the desired transition: the scheduler's copy of those
// may be older than the client's last report or an operator's stop. A placement that replaces an alloc links it back
// through next_allocation.
func applyPlacement(tx *writeTxn, a, existing *pb.Allocation, appliedAt int64) error {
	if existing == nil {
		a.CreateIndex = tx.index
		a.CreatedAt = appliedAt
		if a.GetClientStatus() == pb.AllocClientStatus_ALLOC_CLIENT_STATUS_UNSPECIFIED {
			a.ClientStatus = pb.AllocClientStatus_ALLOC_CLIENT_STATUS_PENDING
		}
	} else {
		a.CreateIndex = existing.GetCreateIndex()
		a.CreatedAt = existing.GetCreatedAt()
		a.ClientStatus = existing.GetClientStatus()
		a.ClientDescription = existing.GetClientDescription()
		a.TaskStates = existing.GetTaskStates()
		// A transition asked for after the scheduler read the alloc (an
		// alloc stop, a drain) is newer than its copy: kept, or the
		// transition's evaluation would find nothing to do.
		a.DesiredTransition = existing.GetDesiredTransition()
	}
	a.ModifyIndex = tx.index
	a.AllocModifyIndex = tx.index
	a.ModifiedAt = appliedAt
	if err := allocsTable.insert(tx, a); err != nil {
		return err
	}
	prevID := a.GetPreviousAllocation()
	if existing != nil || prevID == "" {
		return nil
	}
	prev, err := allocsTable.first(tx, nil, prevID)
	if err != nil || prev == nil || prev.GetNextAllocation() == a.GetId() {
		return err
	}
	p := proto.Clone(prev).(*pb.Allocation)
	p.NextAllocation = a.GetId()
	p.ModifyIndex = tx.index
	return allocsTable.insert(tx, p)
}

// touchNodeAllocs records a server-side change to the node's allocs at the
// command's index (see NodeAllocsIndex).
func touchNodeAllocs(tx *writeTxn, nodeID string) error {
	return nodeAllocIndexTable.insert(tx, &pb.TableIndex{Table: nodeID, Index: tx.index})
}
