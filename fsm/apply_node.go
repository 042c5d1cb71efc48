package fsm

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// applyNodeRegister creates or replaces a node. Re-registering always writes
// (and wakes watchers), because the client re-registers precisely when its
// fingerprint or addresses may have changed; the node keeps the create index
// and registration time of its first registration.
//
// The command's node is stored as it was decoded: it belongs to this entry
// alone, so no copy is needed. Its evals (the system jobs, and the jobs with
// allocs on a node that comes back) are created in the same apply, under
// the same table rule as NodeStatusUpdate's.
func applyNodeRegister(tx *writeTxn, cmd *pb.NodeRegisterCommand) error {
	n := cmd.GetNode()
	if n == nil {
		return fmt.Errorf("%w: no node", ErrInvalidCommand)
	}
	if n.GetId() == "" {
		return fmt.Errorf("%w: node has no ID (name %q)", ErrInvalidCommand, n.GetName())
	}
	if err := checkNodeStatus(n.GetId(), n.GetStatus()); err != nil {
		return err
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return fmt.Errorf("registration of node %q: %w", n.GetId(), err)
	}
	existing, err := nodesTable.first(tx, nil, n.GetId())
	if err != nil {
		return err
	}
	if err := checkRegisterSecret(existing, cmd); err != nil {
		return err
	}
	n.CreateIndex = tx.index
	if n.GetEligibility() == pb.NodeEligibility_NODE_ELIGIBILITY_UNSPECIFIED {
		n.Eligibility = pb.NodeEligibility_NODE_ELIGIBILITY_ELIGIBLE
	}
	if existing != nil {
		// What the servers decided about the node outlives its
		// re-registration (a restart, a fingerprint change): an operator's
		// ineligibility or drain is not undone by the client.
		n.CreateIndex = existing.GetCreateIndex()
		n.RegisteredAt = existing.GetRegisteredAt()
		n.Eligibility = existing.GetEligibility()
		n.Drain = existing.GetDrain()
		// The CSI plugin set is NodeCSIUpdate's (apply_csi.go): a
		// registration, which carries the fingerprint, keeps it.
		n.CsiControllerPlugins = existing.GetCsiControllerPlugins()
		n.CsiNodePlugins = existing.GetCsiNodePlugins()
		// The fence is the operator's (NodeFence): a node that says it is
		// back does not lift it.
		n.Fenced, n.FencedAt = existing.GetFenced(), existing.GetFencedAt()
	}
	n.ModifyIndex = tx.index
	if err := nodesTable.insert(tx, n); err != nil {
		return err
	}
	if existing.GetStatus() != n.GetStatus() {
		if err := nodeChanged(tx, existing, n); err != nil {
			return err
		}
	}
	if len(cmd.GetEvals()) == 0 {
		return nil
	}
	return upsertNodeEvals(tx, cmd.GetEvals())
}

// applyNodeStatusUpdate moves a node to a new status. An update that changes
// neither status nor description writes no node, so heartbeat-driven
// re-proposals of the same status do not wake every blocking query on nodes.
//
// The command's evals (one per job with allocs on the node) are created in
// the same apply, so a node going down or coming back is always evaluated.
// They write the evals table, which servers older than the jobs tables do
// not have: under the table rule (doc.go) a proposer sets evals only once
// every server's recorded version knows the jobs tables.
func applyNodeStatusUpdate(tx *writeTxn, cmd *pb.NodeStatusUpdateCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	if err := checkNodeStatus(id, cmd.GetStatus()); err != nil {
		return err
	}
	if err := checkEvals(cmd.GetEvals()); err != nil {
		return fmt.Errorf("status update of node %q: %w", id, err)
	}
	existing, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
	}
	if want := cmd.GetIfModifyIndex(); want != 0 && existing.GetModifyIndex() != want {
		return fmt.Errorf("node %q is at modify index %d, the %s update was decided at %d: %w",
			id, existing.GetModifyIndex(), cmd.GetStatus(), want, ErrNodeChanged)
	}
	if existing.GetStatus() != cmd.GetStatus() || existing.GetStatusDescription() != cmd.GetDescription() {
		n := proto.Clone(existing).(*pb.Node)
		n.Status = cmd.GetStatus()
		n.StatusDescription = cmd.GetDescription()
		n.StatusUpdatedAt = cmd.GetUpdatedAt()
		n.ModifyIndex = tx.index
		if err := nodesTable.insert(tx, n); err != nil {
			return err
		}
		if existing.GetStatus() != n.GetStatus() {
			if err := nodeChanged(tx, existing, n); err != nil {
				return err
			}
		}
	}
	if len(cmd.GetEvals()) == 0 {
		return nil
	}
	return upsertNodeEvals(tx, cmd.GetEvals())
}

// applyNodeDeregister removes a node. Deregistering a node that is not there
// succeeds without writing, so a deregistration retried after a leader change
// (its first attempt already committed) is not reported as a failure.
func applyNodeDeregister(tx *writeTxn, cmd *pb.NodeDeregisterCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	existing, err := nodesTable.first(tx, nil, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return nil
	}
	if err := nodesTable.delete(tx, existing); err != nil {
		return err
	}
	return nodeChanged(tx, existing, nil)
}

// checkNodeStatus refuses the status no node can be in: unspecified. A
// number this version does not know is stored as it came: it was proposed
// by a newer server, and refusing it here while newer servers apply it would
// make the replicated state differ between versions during an upgrade. The
// proposer validates statuses; the state machine only keeps servers agreed.
func checkNodeStatus(id string, s pb.NodeStatus) error {
	if s == pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
		return fmt.Errorf("%w: node %q: status %s", ErrInvalidCommand, id, s)
	}
	return nil
}
