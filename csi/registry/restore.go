package registry

import (
	"errors"
	"fmt"
	"slices"

	"berth.dev/berth/rpc/pb"
)

// AllocLive reports whether the client still runs an alloc: it has an
// alloc runner for it and the alloc is not terminal. Restore calls it with
// the registry locked, so it must not call the registry.
type AllocLive func(allocID string) bool

// Restore takes back the entries a previous run of the client stored; call
// it once at client start, before the plugin tasks' hooks run. An
// entry whose alloc is not live is dropped from the store and returned in
// dropped; the others become visible with NeedsProbe set (their health is
// from before the restart) and are sent to subscribers. An entry already in
// the registry (its task registered again first) is kept as it is.
//
// Records the store could not read, or stale entries it could not delete,
// are reported in err; everything else is restored regardless, so one bad
// record does not cost the node its other plugins.
func (r *Registry) Restore(live AllocLive) (dropped []*pb.CSIPluginRegistration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stored, readErr := r.store.CSIPluginRegistrations()
	var errs []error
	if readErr != nil {
		errs = append(errs, fmt.Errorf("csi registry: restore: %w", readErr))
	}
	var keep []*pb.CSIPluginRegistration
	for _, reg := range stored {
		if _, ok := r.entries[keyOf(reg)]; ok {
			// Registered again by its task before Restore ran: the live
			// entry is newer than the stored one and already in the store.
			continue
		}
		switch t := reg.GetType(); {
		case t != pb.CSIPluginType_CSI_PLUGIN_TYPE_CONTROLLER && t != pb.CSIPluginType_CSI_PLUGIN_TYPE_NODE,
			reg.GetPluginId() == "", reg.GetAllocId() == "":
			errs = append(errs, fmt.Errorf("csi registry: restore: %s plugin %q of alloc %q: %w",
				typeName(t), reg.GetPluginId(), reg.GetAllocId(), ErrInvalidRegistration))
		case !live(reg.GetAllocId()):
			dropped = append(dropped, reg)
		default:
			keep = append(keep, reg)
		}
	}
	if len(dropped) > 0 {
		if err := r.store.DeleteCSIPluginRegistrations(dropped...); err != nil {
			// They stay in the store, to be dropped by the next restore; they
			// are stale either way and are not restored.
			errs = append(errs, fmt.Errorf("csi registry: restore: drop %d entries of gone allocs: %w", len(dropped), err))
		}
		for _, reg := range dropped {
			r.logger.Info("csi plugin registration dropped: its alloc is gone or terminal",
				"type", typeName(reg.GetType()), "plugin_id", reg.GetPluginId(), "alloc_id", reg.GetAllocId())
		}
	}
	// Oldest first, so the restored entries' registration order (the last
	// tiebreak of Serving) is the one they had.
	slices.SortStableFunc(keep, compareAge)
	for _, reg := range keep {
		r.put(Entry{Registration: reg, NeedsProbe: true})
	}
	return dropped, errors.Join(errs...)
}
