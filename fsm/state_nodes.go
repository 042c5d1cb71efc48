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
// It reads each node's status from its encoding, decoding no node.
func (r reader) NodeCountsByStatus() (map[pb.NodeStatus]int, error) {
	counts := make(map[pb.NodeStatus]int, len(pb.NodeStatus_name))
	for v := range pb.NodeStatus_name {
		if s := pb.NodeStatus(v); s != pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
			counts[s] = 0
		}
	}
	err := eachRow(r.db.Txn(false), nil, TableNodes, func(n *row) error {
		counts[pb.NodeStatus(int32(wireVarint(n.raw, nodeFieldStatus)))]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// storeNode stores the node row r, replacing the node with its ID.
func storeNode(tx *writeTxn, r *row) error {
	if err := tx.insert(TableNodes, r); err != nil {
		return fmt.Errorf("storing node %q: %w", r.key, err)
	}
	tx.touch(TableNodes)
	return nil
}

// deleteNode removes r, which must be the stored row.
func deleteNode(tx *writeTxn, r *row) error {
	if err := tx.delete(TableNodes, r); err != nil {
		return fmt.Errorf("deleting node %q: %w", r.key, err)
	}
	tx.touch(TableNodes)
	return nil
}
