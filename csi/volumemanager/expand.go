package volumemanager

import (
	"context"
	"fmt"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/pb"
)

// ExpandResult is a node expansion's answer.
type ExpandResult struct {
	// CapacityBytes is the plugin's answer (0: it did not say).
	CapacityBytes int64
	// VolumePath is the path the plugin was given, as it sees it.
	VolumePath string
}

// Expand has the volume's node plugin grow it on this node (CSI
// NodeExpandVolume) where the node holds it staged or published. req is
// the call as the servers built it (the provider's volume ID, capacity
// range, capability, secrets); Expand fills in volume_path — the first
// published use's target, else the staging path — and
// staging_target_path. It holds the volume's lock, so no publish or
// teardown of it runs meanwhile. A volume the node does not hold, or holds
// through another plugin, is ErrNotHeld; a node plugin without
// EXPAND_VOLUME is ErrNoNodeExpand. Uncertain errors are retried until
// ctx ends.
func (m *Manager) Expand(ctx context.Context, volumeID, pluginID string, req *csipb.NodeExpandVolumeRequest) (ExpandResult, error) {
	where := fmt.Sprintf("volume %q, node %s", volumeID, m.cfg.NodeID)
	unlock, err := m.lock(ctx, volumeID)
	if err != nil {
		return ExpandResult{}, fmt.Errorf("%s: %w", where, err)
	}
	defer unlock()
	rec := m.record(volumeID)
	path, staging := heldAt(rec)
	if rec == nil || path == "" {
		return ExpandResult{}, fmt.Errorf("%s: %w", where, ErrNotHeld)
	}
	if rec.GetPluginId() != pluginID {
		return ExpandResult{}, fmt.Errorf("%s: %w: held through plugin %q, asked through %q", where, ErrNotHeld, rec.GetPluginId(), pluginID)
	}
	return m.expand(ctx, where, rec, path, staging, req)
}

// expand makes the NodeExpandVolume call at path; the caller holds the
// volume's lock.
func (m *Manager) expand(ctx context.Context, where string, rec *pb.VolumeUsageRecord, path, staging string, req *csipb.NodeExpandVolumeRequest) (ExpandResult, error) {
	call := proto.CloneOf(req)
	call.VolumeId, call.VolumePath, call.StagingTargetPath = rec.GetExternalId(), path, staging
	var resp *csipb.NodeExpandVolumeResponse
	err := m.call(ctx, csi.CallNodeExpandVolume, rec.GetPluginId(), rec.GetVolumeId(), func(ctx context.Context, p Plugin) error {
		if !p.Expand {
			return fmt.Errorf("node plugin %q: %w", rec.GetPluginId(), ErrNoNodeExpand)
		}
		var err error
		resp, err = p.Node.NodeExpandVolume(ctx, call)
		return err
	})
	if err != nil {
		return ExpandResult{VolumePath: path}, fmt.Errorf("%s: expanding at %s: %w", where, path, err)
	}
	m.logger.Info("volume expanded on the node", "volume_id", rec.GetVolumeId(), "path", path, "bytes", resp.GetCapacityBytes())
	return ExpandResult{CapacityBytes: resp.GetCapacityBytes(), VolumePath: path}, nil
}

// heldAt returns where the node holds rec's volume, as the plugin sees
// it: the first published use's target (by user), else the staging path
// when staged, else "". staging is the staging path when staged.
func heldAt(rec *pb.VolumeUsageRecord) (path, staging string) {
	if rec.GetStageState() == pb.VolumeStageState_VOLUME_STAGE_STATE_STAGED {
		staging = rec.GetPluginStagingPath()
	}
	uses := slices.Clone(rec.GetUses())
	slices.SortFunc(uses, func(a, b *pb.VolumeUse) int { return cmp(a.GetUser(), b.GetUser()) })
	for _, u := range uses {
		if u.GetState() == pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
			return u.GetPluginTargetPath(), staging
		}
	}
	return staging, staging
}
