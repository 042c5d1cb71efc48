package fsm

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// Fields of pb.Node and pb.NodeRegisterCommand that NodeRegister reads or
// sets at the wire level, by the numbers the protos give them.
var (
	nodeRegisterDesc      = (*pb.NodeRegisterCommand)(nil).ProtoReflect().Descriptor()
	nodeRegisterWire      = compileWire(nodeRegisterDesc)
	nodeRegisterNodeField = fieldNumber(nodeRegisterDesc, "node")

	nodeDesc              = (*pb.Node)(nil).ProtoReflect().Descriptor()
	nodeFieldID           = fieldNumber(nodeDesc, "id")
	nodeFieldName         = fieldNumber(nodeDesc, "name")
	nodeFieldStatus       = fieldNumber(nodeDesc, "status")
	nodeFieldRegisteredAt = fieldNumber(nodeDesc, "registered_at")
	nodeFieldCreateIndex  = fieldNumber(nodeDesc, "create_index")
	nodeFieldModifyIndex  = fieldNumber(nodeDesc, "modify_index")
)

// nodeRegistration is a NodeRegister command read at the wire level: the
// node's encoding and the fields applying it needs. NodeRegister is the
// command clients send most and the largest, so it is applied without
// decoding the node (see row).
type nodeRegistration struct {
	// node is the node's encoding: a sub-slice of the entry, or the
	// occurrences of the node field concatenated when there are several.
	node   []byte
	id     string
	name   []byte // only for error messages, so not copied
	status pb.NodeStatus
}

// parseNodeRegister checks that body is a valid NodeRegisterCommand, as
// proto.Unmarshal would, and reads its node.
func parseNodeRegister(body []byte) (*nodeRegistration, error) {
	if err := checkWire(nodeRegisterWire, body); err != nil {
		return nil, err
	}
	reg := &nodeRegistration{}
	node, ok := wireMessage(body, nodeRegisterNodeField)
	if !ok {
		return reg, nil
	}
	reg.node = node
	// One pass for the three fields; the last occurrence of each wins.
	eachField(node, func(num protowire.Number, typ protowire.Type, v []byte) {
		switch {
		case num == nodeFieldID && typ == protowire.BytesType:
			id, _ := protowire.ConsumeBytes(v)
			reg.id = string(id)
		case num == nodeFieldName && typ == protowire.BytesType:
			reg.name, _ = protowire.ConsumeBytes(v)
		case num == nodeFieldStatus && typ == protowire.VarintType:
			status, _ := protowire.ConsumeVarint(v)
			reg.status = pb.NodeStatus(int32(status))
		}
	})
	return reg, nil
}

// applyNodeRegister creates or replaces a node. Re-registering always writes
// (and wakes watchers), because the client re-registers precisely when its
// fingerprint or addresses may have changed; the node keeps the create index
// and registration time of its first registration.
//
// The stored row is the node's encoding as the command carried it, followed
// by the fields the FSM assigns (registration time when re-registered,
// create and modify index): appended scalar fields override earlier ones, so
// the row decodes to the registered node with those fields set.
func applyNodeRegister(tx *writeTxn, reg *nodeRegistration) error {
	if reg.node == nil {
		return fmt.Errorf("%w: no node", ErrInvalidCommand)
	}
	if reg.id == "" {
		return fmt.Errorf("%w: node has no ID (name %q)", ErrInvalidCommand, reg.name)
	}
	if err := checkNodeStatus(reg.id, reg.status); err != nil {
		return err
	}
	existing, err := tx.row(TableNodes, reg.id)
	if err != nil {
		return err
	}
	raw := make([]byte, 0, len(reg.node)+3*11)
	raw = append(raw, reg.node...)
	createIndex := tx.index
	if existing != nil {
		// What the first registration set, in one pass (last one wins).
		var registeredAt uint64
		createIndex = 0
		eachField(existing.raw, func(num protowire.Number, typ protowire.Type, v []byte) {
			if typ != protowire.VarintType {
				return
			}
			switch num {
			case nodeFieldCreateIndex:
				createIndex, _ = protowire.ConsumeVarint(v)
			case nodeFieldRegisteredAt:
				registeredAt, _ = protowire.ConsumeVarint(v)
			}
		})
		raw = appendVarintField(raw, nodeFieldRegisteredAt, registeredAt)
	}
	raw = appendVarintField(raw, nodeFieldCreateIndex, createIndex)
	raw = appendVarintField(raw, nodeFieldModifyIndex, tx.index)
	return storeNode(tx, rawRow(reg.id, raw))
}

// applyNodeStatusUpdate moves a node to a new status. An update that changes
// neither status nor description writes nothing, so heartbeat-driven
// re-proposals of the same status do not wake every blocking query on nodes.
func applyNodeStatusUpdate(tx *writeTxn, cmd *pb.NodeStatusUpdateCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	if err := checkNodeStatus(id, cmd.GetStatus()); err != nil {
		return err
	}
	stored, err := tx.row(TableNodes, id)
	if err != nil {
		return err
	}
	if stored == nil {
		return fmt.Errorf("node %q: %w", id, ErrNodeNotFound)
	}
	existing, err := rowMessage[*pb.Node](stored)
	if err != nil {
		return err
	}
	if existing.GetStatus() == cmd.GetStatus() && existing.GetStatusDescription() == cmd.GetDescription() {
		return nil
	}
	n := proto.Clone(existing).(*pb.Node)
	n.Status = cmd.GetStatus()
	n.StatusDescription = cmd.GetDescription()
	n.StatusUpdatedAt = cmd.GetUpdatedAt()
	n.ModifyIndex = tx.index
	r, err := messageRow(id, n)
	if err != nil {
		return err
	}
	return storeNode(tx, r)
}

// applyNodeDeregister removes a node. Deregistering a node that is not there
// succeeds without writing, so a deregistration retried after a leader change
// (its first attempt already committed) is not reported as a failure.
func applyNodeDeregister(tx *writeTxn, cmd *pb.NodeDeregisterCommand) error {
	id := cmd.GetNodeId()
	if id == "" {
		return fmt.Errorf("%w: no node ID", ErrInvalidCommand)
	}
	existing, err := tx.row(TableNodes, id)
	if err != nil {
		return err
	}
	if existing == nil {
		return nil
	}
	return deleteNode(tx, existing)
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
