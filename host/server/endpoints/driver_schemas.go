package endpoints

import (
	"sync"

	"berth.dev/berth/fsm"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk/driverpb"
)

// driverSchemas is the task schema of every driver some node detected, as
// of one index of the nodes table: what checkDrivers validates a job
// against. Reading every node on each job register cost the leader a scan
// of the nodes per register (5.5% of its CPU at 1,000 nodes and 1,000
// jobs); the nodes change far more rarely than jobs are registered
// (a join, a status, eligibility or drain change), so the map is rebuilt
// only when the nodes table's index moved, and a register costs a lookup
// per driver its tasks use.
//
// Where nodes disagree on a driver's schema, the node last in ID order
// wins, as the scan did: the map is a function of the nodes table alone,
// so every server and every rebuild picks the same one.
type driverSchemas struct {
	mu      sync.Mutex
	index   uint64 // the nodes table's index byDrv was built at; 0: none
	byDrv   map[string]*driverpb.Schema
	rebuilt int // how many times byDrv was built (tests)
}

// at returns the schemas of the nodes in snap. The map must not be
// mutated. A snapshot older than the one cached is answered from its own
// nodes without replacing the newer map.
func (c *driverSchemas) at(snap *fsm.StateSnapshot) (map[string]*driverpb.Schema, error) {
	idx, err := snap.Index(fsm.TableNodes)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.byDrv != nil && c.index == idx {
		m := c.byDrv
		c.mu.Unlock()
		return m, nil
	}
	c.mu.Unlock()
	nodes, err := snap.Nodes(nil)
	if err != nil {
		return nil, err
	}
	m := schemasOf(nodes)
	c.mu.Lock()
	c.rebuilt++
	if c.byDrv == nil || idx > c.index {
		c.byDrv, c.index = m, idx
	}
	c.mu.Unlock()
	return m, nil
}

// schemasOf is each detected driver's task schema over nodes (in ID
// order): the last node's wins.
func schemasOf(nodes []*pb.Node) map[string]*driverpb.Schema {
	schemas := map[string]*driverpb.Schema{}
	for _, n := range nodes {
		for name, d := range n.GetDrivers() {
			if d.GetTaskSchema() != nil && d.GetDetected() {
				schemas[name] = d.GetTaskSchema()
			}
		}
	}
	return schemas
}
