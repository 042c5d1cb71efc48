package fsm

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// txnOf makes a memdb read transaction a txnSource.
type txnOf struct{ txn memdbReader }

func (t txnOf) readTxn() memdbReader { return t.txn }

// checkPluginRows holds the plugin table to what the applies keep true of
// it: each row is in one form (one that keeps an instance or an
// allocation has no row in csi_plugin_instances or csi_plugin_allocs),
// every instance and allocation row has its plugin's row, and each row's
// facts are those its instances and allocations derive (counts,
// schedulable, provider and controller_required where the instances
// decide them, each allocation's health). RestoreStrict (an operator's
// snapshot) refuses a snapshot that breaks it (ErrSnapshotCorrupt): a
// split row's counts are trusted by every later apply, which moves them by
// differences, so a snapshot whose rows disagree would drift for ever;
// none that berth wrote does. Restore (raft's) rebuilds them instead
// (restorePluginRows).
func checkPluginRows(src txnSource) error {
	plugins, err := csiPluginsTable.list(src, nil)
	if err != nil {
		return err
	}
	ids := map[string]bool{}
	for _, p := range plugins {
		ids[p.GetId()] = true
		if err := checkPluginRow(src, p); err != nil {
			return fmt.Errorf("csi_plugins row %q: %w", p.GetId(), err)
		}
	}
	insts, err := csiInstancesTable.list(src, nil)
	if err != nil {
		return err
	}
	for _, i := range insts {
		if !ids[i.GetPluginId()] {
			return fmt.Errorf("csi_plugin_instances row %s/%s/%s has no csi_plugins row", i.GetPluginId(), instanceSide(i), i.GetNodeId())
		}
	}
	allocs, err := csiAllocsTable.list(src, nil)
	if err != nil {
		return err
	}
	for _, a := range allocs {
		if !ids[a.GetPluginId()] {
			return fmt.Errorf("csi_plugin_allocs row %s/%s has no csi_plugins row", a.GetPluginId(), a.GetAlloc().GetAllocId())
		}
	}
	return nil
}

func checkPluginRow(src txnSource, p *pb.CSIPlugin) error {
	if inline(p) {
		i, err := firstRow(src, csiInstancesTable.primary, p.GetId())
		if err != nil {
			return err
		}
		a, err := firstRow(src, csiAllocsTable.primary, p.GetId())
		if err != nil {
			return err
		}
		if i != nil || a != nil {
			return fmt.Errorf("keeps its instances or allocations and has rows of csi_plugin_instances or csi_plugin_allocs too")
		}
	}
	full, err := withInstances(src, nil, p)
	if err != nil {
		return err
	}
	d := proto.Clone(full).(*pb.CSIPlugin)
	deriveCSIPlugin(d)
	if got, want := [4]int32{full.GetControllersHealthy(), full.GetControllersExpected(), full.GetNodesHealthy(), full.GetNodesExpected()},
		[4]int32{d.GetControllersHealthy(), d.GetControllersExpected(), d.GetNodesHealthy(), d.GetNodesExpected()}; got != want {
		return fmt.Errorf("counts (controllers healthy/expected, nodes healthy/expected) %v, its instances and allocations make %v", got, want)
	}
	if want := full.GetNodesHealthy() > 0 && (!full.GetControllerRequired() || full.GetControllersHealthy() > 0); full.GetSchedulable() != want {
		return fmt.Errorf("schedulable=%t, its counts and controller_required make %t", full.GetSchedulable(), want)
	}
	// controller_required and the provider keep an earlier word where no
	// instance has one (deriveCSIPlugin): compared where they decide.
	decides, provider := false, false
	for _, set := range []map[string]*pb.CSIPluginInfo{full.GetControllers(), full.GetNodes()} {
		for _, info := range set {
			provider = provider || info.GetProvider() != "" && info.GetHealthy()
		}
	}
	if full.GetDerivedFromServing() {
		provider = true
		for _, info := range full.GetControllers() {
			decides = decides || info.GetControllerInfo() != nil || info.GetControllerRequired()
		}
	} else {
		decides = d.GetControllerRequired() // said once: kept
	}
	if decides && full.GetControllerRequired() != d.GetControllerRequired() {
		return fmt.Errorf("controller_required=%t, its controllers say %t", full.GetControllerRequired(), d.GetControllerRequired())
	}
	if provider && (full.GetProvider() != d.GetProvider() || full.GetVersion() != d.GetVersion()) {
		return fmt.Errorf("provider %q %q, its instances make %q %q", full.GetProvider(), full.GetVersion(), d.GetProvider(), d.GetVersion())
	}
	healthy := map[string]bool{}
	for _, a := range d.GetAllocations() {
		healthy[a.GetAllocId()] = a.GetHealthy()
	}
	for _, a := range full.GetAllocations() {
		if a.GetHealthy() != healthy[a.GetAllocId()] {
			return fmt.Errorf("allocation %s healthy=%t, its instance makes %t", a.GetAllocId(), a.GetHealthy(), healthy[a.GetAllocId()])
		}
	}
	if len(healthy) != len(full.GetAllocations()) {
		return fmt.Errorf("allocations %v listed twice", slices.Sorted(maps.Keys(healthy)))
	}
	return nil
}

// hasPluginTables reports whether s holds the plugin tables (a test's
// schema may not).
func hasPluginTables(s schema) bool {
	for _, name := range []string{TableCSIPlugins, TableCSIPluginInstances, TableCSIPluginAllocs} {
		if _, ok := s.table(name); !ok {
			return false
		}
	}
	return true
}
