package fsm

import (
	"fmt"
	"slices"

	"github.com/hashicorp/go-memdb"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// restorePluginRows holds a restore's plugin rows to checkPluginRows:
// strict, it refuses rows that break it; otherwise it logs at Error what
// disagreed and rebuilds them (repairPluginRows), refusing only what the
// rebuild cannot mend, with how to recover.
func (f *FSM) restorePluginRows(txn *memdb.Txn, strict bool) error {
	err := checkPluginRows(txnOf{txn})
	if err == nil {
		return nil
	}
	if strict {
		return fmt.Errorf("%w: %w (a snapshot berth wrote holds no such rows: restore one taken by a server of this cluster)", ErrSnapshotCorrupt, err)
	}
	fixes, rerr := repairPluginRows(&writeTxn{txn: txn, base: txn, written: map[rowKey]writtenRow{}})
	if rerr == nil {
		rerr = checkPluginRows(txnOf{txn})
	}
	if rerr != nil {
		return fmt.Errorf("%w: %w; rebuilding the plugin rows from their instances and allocations failed: %w (recover by restoring an older snapshot with `berth operator snapshot restore`)", ErrSnapshotCorrupt, err, rerr)
	}
	for _, fix := range fixes {
		f.logger.Error("snapshot's plugin rows disagree with their instances and allocations (a bug of the apply that wrote them): rebuilt", "fix", fix)
	}
	return nil
}

// repairPluginRows makes the plugin rows of a restore hold checkPluginRows
// again, rebuilding each row's facts from its instances and allocations,
// and returns what it changed, one line a fix. It reads and writes only
// the rows, in key order, so every server restoring the same snapshot
// writes the same rows:
//   - an instance or allocation row without its plugin row is deleted;
//   - a row that keeps its instances and has rows in csi_plugin_instances
//     or csi_plugin_allocs too takes them in (a row of the tables wins over
//     the row's own instance on the same node, the first allocation of an
//     ID is kept) and keeps them;
//   - a row that keeps its instances derives its facts again
//     (deriveCSIPlugin); a split row counts its rows again and derives
//     the rest from them (deriveSplit), controller_required kept where an
//     instance said it, as applySplit keeps it.
//
// A row is rewritten with its own indexes, so no reader sees it changed.
func repairPluginRows(tx *writeTxn) ([]string, error) {
	var fixes []string
	src := txnOf{tx.txn}
	plugins, err := csiPluginsTable.list(src, nil)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, p := range plugins {
		ids[p.GetId()] = true
	}
	insts, err := csiInstancesTable.list(src, nil)
	if err != nil {
		return nil, err
	}
	for _, i := range insts {
		if !ids[i.GetPluginId()] {
			fixes = append(fixes, fmt.Sprintf("deleted csi_plugin_instances row %s/%s/%s: it has no csi_plugins row", i.GetPluginId(), instanceSide(i), i.GetNodeId()))
			if err := tx.txn.Delete(TableCSIPluginInstances, i); err != nil {
				return nil, err
			}
		}
	}
	allocs, err := csiAllocsTable.list(src, nil)
	if err != nil {
		return nil, err
	}
	for _, a := range allocs {
		if !ids[a.GetPluginId()] {
			fixes = append(fixes, fmt.Sprintf("deleted csi_plugin_allocs row %s/%s: it has no csi_plugins row", a.GetPluginId(), a.GetAlloc().GetAllocId()))
			if err := tx.txn.Delete(TableCSIPluginAllocs, a); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range plugins {
		why := checkPluginRow(src, p)
		if why == nil {
			continue
		}
		r := proto.Clone(p).(*pb.CSIPlugin)
		if inline(r) {
			if err := takeInRows(tx, r); err != nil {
				return nil, err
			}
			seen := map[string]bool{}
			r.Allocations = slices.DeleteFunc(r.Allocations, func(a *pb.CSIPluginAlloc) bool {
				dup := seen[a.GetAllocId()]
				seen[a.GetAllocId()] = true
				return dup
			})
			deriveCSIPlugin(r)
		} else if err := rederiveSplit(tx, r); err != nil {
			return nil, err
		}
		if err := tx.txn.Insert(TableCSIPlugins, r); err != nil {
			return nil, err
		}
		fixes = append(fixes, fmt.Sprintf("csi_plugins row %q rebuilt from its instances and allocations: %v", p.GetId(), why))
	}
	return fixes, nil
}

// rederiveSplit sets a split row's facts from its rows alone.
func rederiveSplit(tx *writeTxn, r *pb.CSIPlugin) error {
	var counts splitCounts
	err := csiInstancesTable.primary.each(tx.readTxn(), nil, []string{r.GetId()}, func(i *pb.CSIPluginInstance) error {
		counts.add(i.GetController(), i.GetInfo(), 1)
		if !r.GetDerivedFromServing() && i.GetInfo().GetControllerRequired() {
			r.ControllerRequired = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = csiAllocsTable.primary.each(tx.readTxn(), nil, []string{r.GetId()}, func(a *pb.CSIPluginAllocRow) error {
		counts.addAlloc(a.GetAlloc(), 1)
		return nil
	})
	if err != nil {
		return err
	}
	return deriveSplit(tx, r, counts)
}

// takeInRows puts the plugin's rows of csi_plugin_instances and
// csi_plugin_allocs into r, as joinInstances does, and deletes them; the
// derived state is rebuilt after, so it is not told.
func takeInRows(tx *writeTxn, r *pb.CSIPlugin) error {
	src := txnOf{tx.txn}
	insts, err := csiInstancesTable.list(src, nil, r.GetId())
	if err != nil {
		return err
	}
	allocs, err := csiAllocsTable.list(src, nil, r.GetId())
	if err != nil {
		return err
	}
	fillInstances(r, insts, allocs)
	for _, i := range insts {
		if err := tx.txn.Delete(TableCSIPluginInstances, i); err != nil {
			return err
		}
	}
	for _, a := range allocs {
		if err := tx.txn.Delete(TableCSIPluginAllocs, a); err != nil {
			return err
		}
	}
	return nil
}
