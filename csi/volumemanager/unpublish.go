package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi"
	"berth.dev/berth/rpc/pb"
)

// Unpublish takes the user's use of the volume down: NodeUnpublishVolume
// (the use marked UNPUBLISHING before, removed after), then, when no other
// user is left on the node, NodeUnstageVolume (UNSTAGING before, the
// record removed after). A user the node holds nothing for is done at
// once, but a volume left staged with no users (a teardown interrupted
// between the two calls) is unstaged. Uncertain errors are retried until
// ctx ends; what was finished stays finished, so a later Unpublish goes on
// from there. progress, if not nil, is told each call completed
// (StepUnpublished, StepUnstaged), as it completes.
func (m *Manager) Unpublish(ctx context.Context, user, volumeID string, progress Progress) error {
	unlock, err := m.lock(ctx, volumeID)
	if err != nil {
		return fmt.Errorf("volume %q, user %q, node %s: %w", volumeID, user, m.cfg.NodeID, err)
	}
	defer unlock()
	rec := m.record(volumeID)
	if rec == nil {
		return nil
	}
	i, use := findUse(rec, user)
	if use != nil {
		if err := m.unpublish(ctx, rec, i, use, progress); err != nil {
			return err
		}
	}
	last := "no user left"
	if user != "" {
		last = who(user, use.GetOperator())
	}
	return m.unstageIfUnused(ctx, rec, last, progress)
}

func (m *Manager) unpublish(ctx context.Context, rec *pb.VolumeUsageRecord, i int, use *pb.VolumeUse, progress Progress) error {
	volumeID, pluginID := rec.GetVolumeId(), rec.GetPluginId()
	where := fmt.Sprintf("volume %q, %s, node %s", volumeID, who(use.GetUser(), use.GetOperator()), m.cfg.NodeID)
	if use.GetState() != pb.VolumeUseState_VOLUME_USE_STATE_UNPUBLISHING {
		// Not saved: the publish path's removal below is what a restart
		// reads as UNPUBLISHING (teardown_marker.go).
		use.State, use.UpdatedAt = pb.VolumeUseState_VOLUME_USE_STATE_UNPUBLISHING, m.cfg.Now().UnixNano()
		rec.Uses[i] = use
		m.remember(rec)
	}
	// The user's path goes first: nothing reaches the volume through it
	// while it is taken down, and its absence marks the teardown begun.
	userPath := PublishPath(m.cfg.DataDir, use.GetUser(), volumeID)
	if err := os.Remove(userPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: removing the publish path: %w", where, err)
	}
	removeEmpty(filepath.Dir(userPath))
	err := m.call(ctx, csi.CallNodeUnpublishVolume, pluginID, volumeID, func(ctx context.Context, p Plugin) error {
		_, err := p.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: rec.GetExternalId(), TargetPath: use.GetPluginTargetPath()})
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: unpublishing: %w", where, err)
	}
	unpublished := m.cfg.Now()
	// The plugin removes the target it made (CSI spec); what is left is
	// the per-user directory the manager made.
	removeEmpty(use.GetTargetPath())
	removeEmpty(filepath.Dir(use.GetTargetPath()))
	rec.Uses = slices.Delete(rec.Uses, i, i+1)
	if len(rec.Uses) == 0 && rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_UNSPECIFIED {
		// The last user: the unstage follows at once and removes the
		// record; nothing is saved in between. A restart before that
		// finds the use saved PUBLISHED without its path, reads it as
		// UNPUBLISHING, unpublishes again and unstages.
		rec.StageState = pb.VolumeStageState_VOLUME_STAGE_STATE_UNSTAGING
		m.remember(rec)
	} else if err := m.save(rec); err != nil {
		return err
	}
	progress.tell(StepUnpublished, unpublished, userPath)
	return nil
}

// unstageIfUnused unstages rec's volume when no user is left and it is (or
// may be) staged, then forgets the volume.
func (m *Manager) unstageIfUnused(ctx context.Context, rec *pb.VolumeUsageRecord, lastUser string, progress Progress) error {
	if len(rec.GetUses()) > 0 {
		return nil
	}
	volumeID, pluginID := rec.GetVolumeId(), rec.GetPluginId()
	if rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_UNSPECIFIED {
		where := fmt.Sprintf("volume %q (last user: %s), node %s", volumeID, lastUser, m.cfg.NodeID)
		if rec.GetStageState() != pb.VolumeStageState_VOLUME_STAGE_STATE_UNSTAGING {
			rec.StageState = pb.VolumeStageState_VOLUME_STAGE_STATE_UNSTAGING
			if err := m.save(rec); err != nil {
				return err
			}
		}
		err := m.call(ctx, csi.CallNodeUnstageVolume, pluginID, volumeID, func(ctx context.Context, p Plugin) error {
			_, err := p.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: rec.GetExternalId(), StagingTargetPath: rec.GetPluginStagingPath()})
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: unstaging: %w", where, err)
		}
		unstaged := m.cfg.Now()
		removeEmpty(rec.GetStagingPath())
		rec.StageState = pb.VolumeStageState_VOLUME_STAGE_STATE_UNSPECIFIED
		if err := m.save(rec); err != nil {
			return err
		}
		progress.tell(StepUnstaged, unstaged, rec.GetStagingPath())
		return nil
	}
	return m.save(rec)
}

// Sweep takes down every use keep refuses (an alloc the client no longer
// runs, an operator's claim the servers no longer have) and unstages every
// volume left staged without users, one volume at a time. It returns the
// errors of those it could not finish, joined; they stay recorded for the
// next Unpublish or Sweep.
func (m *Manager) Sweep(ctx context.Context, keep func(Use) bool) error {
	var errs []error
	m.mu.Lock()
	ids := make([]string, 0, len(m.usage))
	for id := range m.usage {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	slices.Sort(ids)
	for _, id := range ids {
		rec, ok := m.Usage(id)
		if !ok {
			continue
		}
		gone := 0
		for _, u := range rec.GetUses() {
			use := Use{VolumeID: id, PluginID: rec.GetPluginId(), User: u.GetUser(), Operator: u.GetOperator(), State: u.GetState(),
				Path: PublishPath(m.cfg.DataDir, u.GetUser(), id)}
			if keep(use) {
				continue
			}
			gone++
			m.logger.Info("tearing down a volume use nobody holds any more", "volume_id", id, "user", u.GetUser(), "operator", u.GetOperator())
			if err := m.Unpublish(ctx, u.GetUser(), id, nil); err != nil {
				errs = append(errs, err)
			}
		}
		if gone == 0 && len(rec.GetUses()) == 0 {
			if err := m.Unpublish(ctx, "", id, nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
