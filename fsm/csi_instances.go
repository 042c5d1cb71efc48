package fsm

import (
	"errors"
	"maps"
	"slices"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/internal/versions"
	"berth.dev/berth/rpc/pb"
)

// A plugin's instances, one a node and side, are rows of their own
// (csi_plugin_instances), and its allocations too (csi_plugin_allocs.go),
// once every server is at pluginInstancesSince: the plugin's row (its
// controllers, nodes and allocations left empty) keeps only what it
// derives from them (counts, provider, version, controller_required,
// schedulable), and a node's event rewrites its own instances and updates
// those facts from the instances it changed, where the single row of
// before was cloned, re-derived and compared whole (a cost linear in the
// plugin's nodes, quadratic over a cluster's formation). Before the gate
// the row keeps its instances and allocations, as an older server writes
// it; a split row met while the gate does not hold (a new-code server
// whose servers table records an older version) is joined back. A row is
// in one form or the other, never both: one that holds an instance or an
// allocation keeps them all (inline), one that holds none has its
// instances and allocations, if any, in their tables (split), so the form
// needs no mark on the row, and the row's message and API answers are
// what they were.

// PluginInstancesSinceVersion is the first berth version whose servers
// keep a plugin's instances in csi_plugin_instances.
const PluginInstancesSinceVersion = "0.1.0-dev.4"

// pluginInstancesSince is the gate of the split rows, decided from the
// replicated servers table as claimStateSince is (claim_state_since.go).
var pluginInstancesSince = versions.MustConstraint(">= " + PluginInstancesSinceVersion)

// forceInstancesSplit, set only by tests (export_test.go), decides the
// gate instead of the servers table, so every script can run both ways.
// Never set outside tests: it decides a replicated rule, and is not safe
// with t.Parallel.
var forceInstancesSplit *bool

// pluginInstancesOn reports whether the split rule holds in tx.
func pluginInstancesOn(tx *writeTxn) (bool, error) {
	if forceInstancesSplit != nil {
		return *forceInstancesSplit, nil
	}
	if tx.instancesSplit != 0 {
		return tx.instancesSplit > 0, nil
	}
	servers, err := serversTable.list(tx, nil)
	if err != nil {
		return false, err
	}
	on := serversAt(servers, pluginInstancesSince)
	tx.instancesSplit = -1
	if on {
		tx.instancesSplit = 1
	}
	return on, nil
}

var (
	csiInstancesTable = newTable(TableCSIPluginInstances, (*pb.CSIPluginInstance).GetPluginId, instanceSide, (*pb.CSIPluginInstance).GetNodeId)
	// csiInstancesByHealthy holds the instances that name a provider,
	// healthy ones first, by node: its first row of a plugin's side is the
	// instance whose provider the row takes.
	csiInstancesByHealthy = csiInstancesTable.index("healthy", (*pb.CSIPluginInstance).GetPluginId, instanceSide, instanceHealthKey, (*pb.CSIPluginInstance).GetNodeId)
	// csiInstancesByProvider holds the instances that name a provider, by
	// node: the first when none is healthy.
	csiInstancesByProvider = csiInstancesTable.index("provider", (*pb.CSIPluginInstance).GetPluginId, instanceSide, instanceProviderKey, (*pb.CSIPluginInstance).GetNodeId)
)

// Sides as key parts: controllers sort first, as deriveCSIPlugin reads
// them.
const (
	sideController = "c"
	sideNode       = "n"
)

func sideOf(controller bool) string {
	if controller {
		return sideController
	}
	return sideNode
}

func instanceSide(i *pb.CSIPluginInstance) string { return sideOf(i.GetController()) }

func instanceHealthKey(i *pb.CSIPluginInstance) string {
	switch {
	case i.GetInfo().GetProvider() == "":
		return ""
	case i.GetInfo().GetHealthy():
		return "0"
	}
	return "1"
}

func instanceProviderKey(i *pb.CSIPluginInstance) string {
	if i.GetInfo().GetProvider() == "" {
		return ""
	}
	return "p"
}

// instanceKey names one instance of a plugin.
type instanceKey struct {
	controller bool
	node       string
}

func compareInstanceKeys(a, b instanceKey) int {
	switch {
	case a.controller != b.controller:
		if a.controller {
			return -1
		}
		return 1
	case a.node < b.node:
		return -1
	case a.node > b.node:
		return 1
	}
	return 0
}

// firstRow returns the first row of x's order under parts, or nil.
func firstRow[M proto.Message](src txnSource, x *index[M], parts ...string) (M, error) {
	var out M
	err := x.each(src.readTxn(), nil, parts, func(m M) error {
		out = m
		return errStopScan
	})
	if err != nil && !errors.Is(err, errStopScan) {
		var zero M
		return zero, err
	}
	return out, nil
}

// inline reports whether p keeps its instances and allocations (holds
// one).
func inline(p *pb.CSIPlugin) bool {
	return len(p.GetControllers())+len(p.GetNodes())+len(p.GetAllocations()) > 0
}

// withInstances returns p with its instances and allocations: p itself
// for a row that keeps them or has none, a copy filled from
// csi_plugin_instances and csi_plugin_allocs for a split row (adding a
// watch on them to ws), its allocations' health derived from the
// instances.
func withInstances(src txnSource, ws memdb.WatchSet, p *pb.CSIPlugin) (*pb.CSIPlugin, error) {
	if inline(p) {
		return p, nil
	}
	insts, err := csiInstancesTable.list(src, ws, p.GetId())
	if err != nil {
		return nil, err
	}
	allocs, err := csiAllocsTable.list(src, ws, p.GetId())
	if err != nil || len(insts)+len(allocs) == 0 {
		return p, err
	}
	out := proto.Clone(p).(*pb.CSIPlugin)
	fillInstances(out, insts, allocs)
	allocHealth(out)
	return out, nil
}

// fillInstances puts instance and allocation rows into r.
func fillInstances(r *pb.CSIPlugin, insts []*pb.CSIPluginInstance, allocs []*pb.CSIPluginAllocRow) {
	for _, i := range insts {
		side := &r.Nodes
		if i.GetController() {
			side = &r.Controllers
		}
		if *side == nil {
			*side = map[string]*pb.CSIPluginInfo{}
		}
		(*side)[i.GetNodeId()] = i.GetInfo()
	}
	for _, a := range allocs {
		r.Allocations = append(r.Allocations, proto.Clone(a.GetAlloc()).(*pb.CSIPluginAlloc))
	}
}

// joinInstances puts a split row's instances and allocations, if any,
// back into r (a clone of the stored row) and deletes their rows: the
// form an older server writes.
func joinInstances(tx *writeTxn, r *pb.CSIPlugin) error {
	insts, err := csiInstancesTable.list(tx, nil, r.GetId())
	if err != nil {
		return err
	}
	allocs, err := csiAllocsTable.list(tx, nil, r.GetId())
	if err != nil {
		return err
	}
	fillInstances(r, insts, allocs)
	for _, i := range insts {
		if err := csiInstancesTable.delete(tx, i); err != nil {
			return err
		}
	}
	for _, a := range allocs {
		if err := csiAllocsTable.delete(tx, a); err != nil {
			return err
		}
	}
	return nil
}

// applyInline applies the apply's instance changes to a row that keeps
// its instances.
func applyInline(r *pb.CSIPlugin, changes map[instanceKey]*pb.CSIPluginInfo) {
	for _, k := range slices.SortedFunc(maps.Keys(changes), compareInstanceKeys) {
		side := &r.Nodes
		if k.controller {
			side = &r.Controllers
		}
		delete(*side, k.node)
		info := changes[k]
		if info == nil {
			continue
		}
		if *side == nil {
			*side = map[string]*pb.CSIPluginInfo{}
		}
		(*side)[k.node] = info
	}
}

// splitCounts are what a split row derives from its instances alone.
type splitCounts struct {
	healthy  [2]int32 // controllers, nodes
	expected [2]int32 // instances no alloc runs
}

func sideIndex(controller bool) int {
	if controller {
		return 0
	}
	return 1
}

func (s *splitCounts) add(controller bool, info *pb.CSIPluginInfo, by int32) {
	if info == nil {
		return
	}
	i := sideIndex(controller)
	if info.GetHealthy() {
		s.healthy[i] += by
	}
	if info.GetAllocId() == "" {
		s.expected[i] += by
	}
}

// applySplit writes the apply's instance and allocation changes of
// plugin r (a clone of stored, or new) as rows of csi_plugin_instances and
// csi_plugin_allocs and updates r's facts from them: counts by the
// changed rows' differences, provider from the first instances in
// csiInstancesByHealthy and csiInstancesByProvider, controller_required
// from the plugin's controllers (few). A row that kept its instances (one
// written before the gate, or restored from a snapshot of then) is split
// first. It reports whether an instance or an allocation changed (not
// the split itself).
func applySplit(tx *writeTxn, r, stored *pb.CSIPlugin, changes map[instanceKey]*pb.CSIPluginInfo, allocs map[string]*pb.CSIPluginAlloc) (bool, error) {
	var counts splitCounts
	changed := false
	all := false // controller_required is read from every instance
	if !inline(r) {
		// Split already, or without instances: the stored counts are those
		// of its rows (none for a new row).
		counts.healthy = [2]int32{stored.GetControllersHealthy(), stored.GetNodesHealthy()}
		counts.expected = [2]int32{stored.GetControllersExpected(), stored.GetNodesExpected()}
		all = stored == nil
	} else {
		all = true
		if err := splitRow(tx, r, &counts); err != nil {
			return false, err
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(changes), compareInstanceKeys) {
		info := changes[k]
		old, err := csiInstancesTable.first(tx, nil, r.GetId(), sideOf(k.controller), k.node)
		if err != nil {
			return false, err
		}
		if old == nil && info == nil || old != nil && info != nil && proto.Equal(old.GetInfo(), info) {
			continue
		}
		changed = true
		if old != nil {
			counts.add(k.controller, old.GetInfo(), -1)
			if info == nil {
				if err := csiInstancesTable.delete(tx, old); err != nil {
					return false, err
				}
				continue
			}
		}
		counts.add(k.controller, info, 1)
		if !r.GetDerivedFromServing() && info.GetControllerRequired() {
			r.ControllerRequired = true // the rule before derived_from_serving: kept once said
		}
		if err := csiInstancesTable.insert(tx, &pb.CSIPluginInstance{PluginId: r.GetId(), NodeId: k.node, Controller: k.controller, Info: info}); err != nil {
			return false, err
		}
	}
	allocsChanged, err := applySplitAllocs(tx, r.GetId(), &counts, allocs)
	if err != nil {
		return false, err
	}
	changed = changed || allocsChanged
	if all && !r.GetDerivedFromServing() {
		// A row split now: its earlier instances said what they said.
		each := func(i *pb.CSIPluginInstance) error {
			if i.GetInfo().GetControllerRequired() {
				r.ControllerRequired = true
			}
			return nil
		}
		if err := csiInstancesTable.primary.each(tx.readTxn(), nil, []string{r.GetId()}, each); err != nil {
			return false, err
		}
	}
	if err := deriveSplit(tx, r, counts); err != nil {
		return false, err
	}
	return changed, nil
}

// splitRow moves an inline row's instances and allocations into their
// tables, counting them, and empties the row; applySplit then applies the
// apply's changes to them as to any split row, so a change that changes
// nothing is none.
func splitRow(tx *writeTxn, r *pb.CSIPlugin, counts *splitCounts) error {
	for _, side := range []struct {
		controller bool
		instances  map[string]*pb.CSIPluginInfo
	}{{true, r.GetControllers()}, {false, r.GetNodes()}} {
		for _, node := range slices.Sorted(maps.Keys(side.instances)) {
			info := side.instances[node]
			counts.add(side.controller, info, 1)
			if err := csiInstancesTable.insert(tx, &pb.CSIPluginInstance{PluginId: r.GetId(), NodeId: node, Controller: side.controller, Info: info}); err != nil {
				return err
			}
		}
	}
	for _, a := range r.GetAllocations() {
		counts.addAlloc(a, 1)
		if err := csiAllocsTable.insert(tx, storedAlloc(r.GetId(), a)); err != nil {
			return err
		}
	}
	r.Controllers, r.Nodes, r.Allocations = nil, nil, nil
	return nil
}

// deriveSplit sets what a split row derives, as deriveCSIPlugin does for
// a row that keeps its instances: a few lookups, however many instances
// and allocations the plugin has.
func deriveSplit(tx *writeTxn, r *pb.CSIPlugin, counts splitCounts) error {
	r.ControllersHealthy, r.NodesHealthy = counts.healthy[0], counts.healthy[1]
	r.ControllersExpected, r.NodesExpected = counts.expected[0], counts.expected[1]
	var healthy, first *pb.CSIPluginInstance
	for _, side := range []string{sideController, sideNode} {
		var err error
		if healthy == nil {
			if healthy, err = firstRow(tx, csiInstancesByHealthy, r.GetId(), side, "0"); err != nil {
				return err
			}
		}
		if first == nil {
			if first, err = firstRow(tx, csiInstancesByProvider, r.GetId(), side, "p"); err != nil {
				return err
			}
		}
	}
	if !r.GetDerivedFromServing() {
		if healthy != nil {
			r.Provider, r.Version = healthy.GetInfo().GetProvider(), healthy.GetInfo().GetProviderVersion()
		}
	} else {
		spoke, required := false, false
		err := csiInstancesTable.primary.each(tx.readTxn(), nil, []string{r.GetId(), sideController}, func(i *pb.CSIPluginInstance) error {
			info := i.GetInfo()
			if info.GetControllerInfo() != nil || info.GetControllerRequired() {
				spoke = true
				required = required || info.GetControllerRequired()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if spoke {
			r.ControllerRequired = required
		}
		if healthy != nil {
			first = healthy
		}
		r.Provider, r.Version = first.GetInfo().GetProvider(), first.GetInfo().GetProviderVersion()
	}
	r.Schedulable = r.NodesHealthy > 0 && (!r.ControllerRequired || r.ControllersHealthy > 0)
	return nil
}

// hasInstances reports whether the plugin has an instance row.
func hasInstances(tx *writeTxn, pluginID string) (bool, error) {
	i, err := firstRow(tx, csiInstancesTable.primary, pluginID)
	return i != nil, err
}
