package fsm

import (
	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/rpc/pb"
)

// NodeByID returns the node with the given ID, or nil (and no error) if there
// is none, so a blocking query can wait for a node to appear. It adds a watch
// on that node to ws (which may be nil). The node must not be mutated.
func (r reader) NodeByID(ws memdb.WatchSet, id string) (*pb.Node, error) {
	return nodesTable.first(r, ws, id)
}

// Nodes returns every node sorted by ID, adding a watch on the nodes table to
// ws (which may be nil). The nodes must not be mutated.
func (r reader) Nodes(ws memdb.WatchSet) ([]*pb.Node, error) {
	return nodesTable.list(r, ws)
}

// NodesPage returns one page of nodes sorted by ID: from the first node
// whose ID is at or after from ("" for the start), the nodes keep accepts
// (every node when keep is nil), at most limit of them (all when limit <=
// 0). next is the ID of the first node after the page that keep accepts, ""
// when there is none: pass it back as from for the next page. It adds a
// watch on the nodes table to ws (which may be nil). The nodes must not be
// mutated.
func (r reader) NodesPage(ws memdb.WatchSet, from string, limit int, keep func(*pb.Node) bool) (nodes []*pb.Node, next string, err error) {
	var lower []string
	if from != "" {
		lower = []string{from}
	}
	nodes, nextKey, err := nodesTable.page(r, ws, lower, limit, keep)
	if err != nil || nextKey == nil {
		return nodes, "", err
	}
	return nodes, nextKey[0], nil
}

// NodeCountsByStatus counts nodes by status. Every known status is present,
// with 0 when no node has it, so a gauge built from it drops back to zero.
func (r reader) NodeCountsByStatus() (map[pb.NodeStatus]int, error) {
	counts := make(map[pb.NodeStatus]int, len(pb.NodeStatus_name))
	for v := range pb.NodeStatus_name {
		if s := pb.NodeStatus(v); s != pb.NodeStatus_NODE_STATUS_UNSPECIFIED {
			counts[s] = 0
		}
	}
	err := nodesTable.primary.each(r.readTxn(), nil, nil, func(n *pb.Node) error {
		counts[n.GetStatus()]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}
