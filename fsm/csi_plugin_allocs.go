package fsm

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// A split plugin's allocations (the allocs that run it: a node plugin of
// a system job has one a node) are rows of csi_plugin_allocs, as its
// instances are rows of csi_plugin_instances, so a node's event neither
// copies nor walks them: the row's expected counts move by the
// allocations an apply files or removes, and an allocation's healthy
// (its instance on its node runs it and is healthy) is not stored but
// derived by the read (withInstances), where the inline row derives it
// at every apply (deriveCSIPlugin).

var (
	csiAllocsTable = newTable(TableCSIPluginAllocs, (*pb.CSIPluginAllocRow).GetPluginId, allocRowID)
	// csiAllocsByJob holds the allocations by job, then plugin: a job's
	// update or purge finds the ones it removes without a scan.
	csiAllocsByJob = csiAllocsTable.index("job", allocRowJob, (*pb.CSIPluginAllocRow).GetPluginId)
)

func allocRowID(a *pb.CSIPluginAllocRow) string  { return a.GetAlloc().GetAllocId() }
func allocRowJob(a *pb.CSIPluginAllocRow) string { return a.GetAlloc().GetJobId() }

// allocSides is what an allocation of type t adds to the expected
// controllers and nodes (a monolith counts on both).
func allocSides(t pb.CSIPluginType) (ctl, node int32) {
	if t != pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE {
		ctl = 1
	}
	if t != pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER {
		node = 1
	}
	return ctl, node
}

func (s *splitCounts) addAlloc(a *pb.CSIPluginAlloc, by int32) {
	if a == nil {
		return
	}
	ctl, node := allocSides(a.GetType())
	s.expected[0] += by * ctl
	s.expected[1] += by * node
}

// setAlloc records the allocation of plugin id the apply leaves under
// allocID (nil: none).
func (c *csiChanges) setAlloc(id, allocID string, a *pb.CSIPluginAlloc) {
	if c.allocs[id] == nil {
		c.allocs[id] = map[string]*pb.CSIPluginAlloc{}
	}
	c.allocs[id][allocID] = a
}

// dropJob records that every allocation of job leaves plugin r: those
// the row holds (inline), those of csi_plugin_allocs (split) and those
// this apply filed.
func (c *csiChanges) dropJob(tx *writeTxn, r *pb.CSIPlugin, job string) error {
	ids := map[string]bool{}
	for _, a := range r.GetAllocations() {
		if a.GetJobId() == job {
			ids[a.GetAllocId()] = true
		}
	}
	rows, err := csiAllocsByJob.list(tx, nil, job, r.GetId())
	if err != nil {
		return err
	}
	for _, a := range rows {
		ids[a.GetAlloc().GetAllocId()] = true
	}
	for id, a := range c.allocs[r.GetId()] {
		if a.GetJobId() == job {
			ids[id] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		c.setAlloc(r.GetId(), id, nil)
	}
	return nil
}

// jobPlugins returns the IDs of the plugins with a row of
// csi_plugin_allocs of job.
func jobPlugins(tx *writeTxn, job string) (map[string]bool, error) {
	rows, err := csiAllocsByJob.list(tx, nil, job)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range rows {
		out[a.GetPluginId()] = true
	}
	return out, nil
}

// applyAllocsInline applies the apply's allocation changes to a row that
// keeps its allocations (deriveCSIPlugin sorts them).
func applyAllocsInline(r *pb.CSIPlugin, changes map[string]*pb.CSIPluginAlloc) {
	for _, id := range slices.Sorted(maps.Keys(changes)) {
		r.Allocations = slices.DeleteFunc(r.Allocations, func(x *pb.CSIPluginAlloc) bool { return x.GetAllocId() == id })
		if a := changes[id]; a != nil {
			r.Allocations = append(r.Allocations, a)
		}
	}
}

// storedAlloc is a as csi_plugin_allocs holds it: without its health.
func storedAlloc(pluginID string, a *pb.CSIPluginAlloc) *pb.CSIPluginAllocRow {
	if a.GetHealthy() {
		a = proto.Clone(a).(*pb.CSIPluginAlloc)
		a.Healthy = false
	}
	return &pb.CSIPluginAllocRow{PluginId: pluginID, Alloc: a}
}

// applySplitAllocs writes the apply's allocation changes of plugin id as
// rows of csi_plugin_allocs and moves counts by their differences. It
// reports whether one changed.
func applySplitAllocs(tx *writeTxn, id string, counts *splitCounts, changes map[string]*pb.CSIPluginAlloc) (bool, error) {
	changed := false
	for _, allocID := range slices.Sorted(maps.Keys(changes)) {
		a := changes[allocID]
		old, err := csiAllocsTable.first(tx, nil, id, allocID)
		if err != nil {
			return false, err
		}
		if old == nil && a == nil || old != nil && a != nil && proto.Equal(old.GetAlloc(), storedAlloc(id, a).GetAlloc()) {
			continue
		}
		changed = true
		if old != nil {
			counts.addAlloc(old.GetAlloc(), -1)
			if a == nil {
				if err := csiAllocsTable.delete(tx, old); err != nil {
					return false, err
				}
				continue
			}
		}
		counts.addAlloc(a, 1)
		if err := csiAllocsTable.insert(tx, storedAlloc(id, a)); err != nil {
			return false, err
		}
	}
	return changed, nil
}

// hasAllocs reports whether the plugin has a row of csi_plugin_allocs.
func hasAllocs(tx *writeTxn, pluginID string) (bool, error) {
	a, err := firstRow(tx, csiAllocsTable.primary, pluginID)
	return a != nil, err
}

// allocHealth sets each allocation's healthy from the plugin's
// instances, as deriveCSIPlugin does: its instance on its node, of either
// side, runs it and is healthy.
func allocHealth(p *pb.CSIPlugin) {
	for _, a := range p.GetAllocations() {
		a.Healthy = false
		for _, inst := range []*pb.CSIPluginInfo{p.GetControllers()[a.GetNodeId()], p.GetNodes()[a.GetNodeId()]} {
			if inst.GetAllocId() == a.GetAllocId() && inst.GetHealthy() {
				a.Healthy = true
			}
		}
	}
}

// splitLeft reports whether a split plugin has an instance or an
// allocation left.
func splitLeft(tx *writeTxn, pluginID string) (bool, error) {
	if ok, err := hasInstances(tx, pluginID); err != nil || ok {
		return ok, err
	}
	return hasAllocs(tx, pluginID)
}

// csiReform writes r, a row the apply only moved to the other form
// (split, or joined back), when a read of it (withInstances) is before,
// the read of the stored row: with the stored row's indexes and without
// marking csi_plugins changed, so the form's change wakes no reader that
// waits on an index (a blocking query re-reads and waits again). It
// reports whether it wrote r; otherwise the caller writes it as a change.
func csiReform(tx *writeTxn, r, before *pb.CSIPlugin) (bool, error) {
	after, err := withInstances(tx, nil, r)
	if err != nil {
		return false, err
	}
	a, b := proto.Clone(after).(*pb.CSIPlugin), proto.Clone(before).(*pb.CSIPlugin)
	a.CreateIndex, a.ModifyIndex, b.CreateIndex, b.ModifyIndex = 0, 0, 0, 0
	if !proto.Equal(a, b) {
		return false, nil
	}
	r.CreateIndex, r.ModifyIndex = before.GetCreateIndex(), before.GetModifyIndex()
	return true, csiPluginsTable.reform(tx, r)
}
