package fsm

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// NodeByID returns the node with the given ID, or nil (and no error) if there
// is none, so a blocking query can wait for a node to appear. It adds a watch
// on that node to ws (which may be nil). The node must not be mutated.
func (r reader) NodeByID(ws memdb.WatchSet, id string) (*pb.Node, error) {
	return first[*pb.Node](r.db.Txn(false), ws, TableNodes, id)
}

// Nodes returns every node sorted by ID, adding a watch on the nodes table to
// ws (which may be nil). The nodes must not be mutated.
func (r reader) Nodes(ws memdb.WatchSet) ([]*pb.Node, error) {
	return list[*pb.Node](r.db.Txn(false), ws, TableNodes)
}

// NodeCountsByStatus counts nodes by status. Every known status is present,
// with 0 when no node has it, so a gauge built from it drops back to zero.
func (r reader) NodeCountsByStatus() (map[pb.NodeStatus]int, error) {
	nodes, err := r.Nodes(nil)
	if err != nil {
		return nil, err
	}
	counts := make(map[pb.NodeStatus]int, len(pb.NodeStatus_name))
	for v := range pb.NodeStatus_name {
		if s := pb.NodeStatus(v); s != pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
			counts[s] = 0
		}
	}
	for _, n := range nodes {
		counts[n.GetStatus()]++
	}
	return counts, nil
}

// insertNode stores n at the transaction's index. n must be owned by the
// caller (freshly decoded or cloned) and is not touched after this.
func insertNode(tx *writeTxn, n *pb.Node) error {
	n.ModifyIndex = tx.index
	if err := tx.insert(TableNodes, n); err != nil {
		return fmt.Errorf("storing node %q: %w", n.GetId(), err)
	}
	tx.touch(TableNodes)
	return nil
}

// deleteNode removes n, which must be the stored row.
func deleteNode(tx *writeTxn, n *pb.Node) error {
	if err := tx.delete(TableNodes, n); err != nil {
		return fmt.Errorf("deleting node %q: %w", n.GetId(), err)
	}
	tx.touch(TableNodes)
	return nil
}
