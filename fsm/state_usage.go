package fsm

import (
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/go-memdb"

	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// node_usage holds one pb.NodeUsage per node that has allocs not terminal
// (rules.AllocTerminal): the sums of their cpu and memory and their count. It is
// what PlanApply's fit check reads: one row, where summing the node's
// allocs read each of them (a hundred and more on a busy node, and the
// read through the batch's transaction cost the alloc index its copied
// path). It is derived from the allocs table (see derived): every
// allocsTable.insert and delete moves it in the same transaction, and
// Restore rebuilds it from the allocs it read, so a row is exactly the sum
// over the node's allocs in the state, whatever commands built it, and a
// snapshot does not carry it (servers of older versions neither write nor
// need it). A node none of whose allocs holds anything has no row.

// NodeUsage returns what the node's allocs that are not terminal hold of
// it, nil when there are none, adding a watch on its row to ws.
func (r reader) NodeUsage(ws memdb.WatchSet, nodeID string) (*pb.NodeUsage, error) {
	return nodeUsageTable.first(r, ws, nodeID)
}

// allocNodeUsage keeps node_usage from the allocs table.
type allocNodeUsage struct{}

var _ derived[*pb.Allocation] = allocNodeUsage{}

func (allocNodeUsage) schema() *memdb.TableSchema { return nodeUsageTable.memdbSchema() }

// usageOf is what a counts against its node: nothing when it is absent,
// terminal or on no node.
func usageOf(a *pb.Allocation) (node string, u nodeUsageDelta) {
	if a == nil || a.GetNodeId() == "" || rules.AllocTerminal(a) {
		return "", nodeUsageDelta{}
	}
	return a.GetNodeId(), nodeUsageDelta{cpu: a.GetResources().GetCpuMhz(), mem: a.GetResources().GetMemoryMb(), allocs: 1}
}

// nodeUsageDelta is a change to one node's row.
type nodeUsageDelta struct{ cpu, mem, allocs int64 }

func (d nodeUsageDelta) minus(o nodeUsageDelta) nodeUsageDelta {
	return nodeUsageDelta{cpu: d.cpu - o.cpu, mem: d.mem - o.mem, allocs: d.allocs - o.allocs}
}

func (allocNodeUsage) changed(tx *writeTxn, old, new *pb.Allocation) error {
	oldNode, was := usageOf(old)
	newNode, is := usageOf(new)
	if oldNode == newNode {
		// A client update of a running alloc, the common case, changes
		// nothing here and costs no write.
		if d := is.minus(was); d != (nodeUsageDelta{}) {
			return addNodeUsage(tx, newNode, d)
		}
		return nil
	}
	if oldNode != "" {
		if err := addNodeUsage(tx, oldNode, nodeUsageDelta{}.minus(was)); err != nil {
			return err
		}
	}
	if newNode != "" {
		return addNodeUsage(tx, newNode, is)
	}
	return nil
}

// addNodeUsage adds d to the node's row, creating it, or deleting it when
// no alloc is left in it.
func addNodeUsage(tx *writeTxn, node string, d nodeUsageDelta) error {
	row, err := nodeUsageTable.first(tx, nil, node)
	if err != nil {
		return err
	}
	n := &pb.NodeUsage{NodeId: node, CpuMhz: row.GetCpuMhz() + d.cpu, MemoryMb: row.GetMemoryMb() + d.mem, Allocs: row.GetAllocs() + d.allocs}
	switch {
	case n.Allocs < 0:
		// Only a bug in this file could get here: every alloc counted out
		// was counted in.
		return fmt.Errorf("node %q: usage of %d allocs after a change of %d", node, n.Allocs, d.allocs)
	case n.Allocs == 0 && row != nil:
		if err := tx.deleteRow(TableNodeUsage, encodeKey([]string{node}), row); err != nil {
			return fmt.Errorf("deleting node_usage row %q: %w", node, err)
		}
	case n.Allocs > 0:
		if err := tx.insertRow(TableNodeUsage, encodeKey([]string{node}), n); err != nil {
			return fmt.Errorf("storing node_usage row %q: %w", node, err)
		}
	}
	return nil
}

func (allocNodeUsage) rebuild(txn *memdb.Txn, src *table[*pb.Allocation]) error {
	sums := map[string]nodeUsageDelta{}
	err := src.primary.each(txn, nil, nil, func(a *pb.Allocation) error {
		if node, u := usageOf(a); node != "" {
			s := sums[node]
			sums[node] = nodeUsageDelta{cpu: s.cpu + u.cpu, mem: s.mem + u.mem, allocs: s.allocs + u.allocs}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, node := range slices.Sorted(maps.Keys(sums)) {
		s := sums[node]
		if err := txn.Insert(TableNodeUsage, &pb.NodeUsage{NodeId: node, CpuMhz: s.cpu, MemoryMb: s.mem, Allocs: s.allocs}); err != nil {
			return fmt.Errorf("storing node_usage row %q: %w", node, err)
		}
	}
	return nil
}
