package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// applyNodeEligibility sets whether new allocs may be placed on a node and
// creates the command's evals (making a node eligible is capacity the
// blocked evals may use). A draining node stays ineligible: making it
// eligible is refused (ErrNodeDraining) until its drain ends. A node
// already at the eligibility asked is not rewritten; its evals are still
// created.
func applyNodeEligibility(tx *writeTxn, cmd *pb.NodeEligibilityCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	if cmd.GetEligibility() == pb.NodeEligibility_NODE_ELIGIBILITY_UNSPECIFIED {
		return fmt.Errorf("%w: node %q: eligibility unspecified", ErrInvalidCommand, id)
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return fmt.Errorf("eligibility of node %q: %w", id, err)
	}
	existing, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
	}
	if existing.GetDrain() != nil && cmd.GetEligibility() == pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE {
		return fmt.Errorf("node %q cannot be made eligible while it drains (end the drain first): %w", id, ErrNodeDraining)
	}
	if existing.GetEligibility() != cmd.GetEligibility() {
		n := proto.Clone(existing).(*pb.Node)
		n.Eligibility = cmd.GetEligibility()
		n.ModifyIndex = tx.index
		if err := nodesTable.insert(tx, n); err != nil {
			return err
		}
	}
	return upsertNodeEvals(tx, cmd.GetEvals())
}

// applyNodeDrain starts, updates or ends a node's drain. A drain makes the
// node ineligible (the drainer then moves its allocs off with
// AllocDesiredTransition). Ending it (no drain) leaves the node
// ineligible unless mark_eligible, as `node drain -disable` does; an
// operator may keep a node out of scheduling after a drain. Ending a
// drain that is not under way only applies mark_eligible. The command's
// evals are created.
func applyNodeDrain(tx *writeTxn, cmd *pb.NodeDrainCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return fmt.Errorf("drain of node %q: %w", id, err)
	}
	existing, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
	}
	n := proto.Clone(existing).(*pb.Node)
	n.Drain = cmd.GetDrain()
	switch {
	case n.Drain != nil:
		n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_INELIGIBLE
	case cmd.GetMarkEligible():
		n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
	}
	if !proto.Equal(n, existing) {
		n.ModifyIndex = tx.index
		if err := nodesTable.insert(tx, n); err != nil {
			return err
		}
	}
	return upsertNodeEvals(tx, cmd.GetEvals())
}

// upsertNodeEvals creates the evals a node command carries and recomputes
// the status of their jobs.
func upsertNodeEvals(tx *writeTxn, evals []*pb.Evaluation) error {
	jobs, err := upsertEvals(tx, evals)
	if err != nil {
		return err
	}
	return recomputeJobStatuses(tx, jobs)
}
