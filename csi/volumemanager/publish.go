package volumemanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// PublishRequest asks for a volume to be published for one user.
type PublishRequest struct {
	// Volume is the volume as the servers answer it (ClientClaim): ID,
	// plugin, external ID, context, secrets, mount options.
	Volume *pb.Volume
	// User is the alloc ID, or the claim ID of an operator's claim.
	User     string
	Operator bool
	// AccessMode and AttachmentMode are the claim's capability.
	AccessMode     pb.VolumeAccessMode
	AttachmentMode pb.VolumeAttachmentMode
	// MountOptions override the volume's (the group's volume request).
	MountOptions *pb.MountOptions
	ReadOnly     bool
	// PublishContext is the attachment's (ControllerPublishVolume's
	// answer), empty when the plugin needs no controller publish.
	PublishContext map[string]string
	// Progress, if set, is told each node call this Publish completes
	// (StepStaged, StepPublished), as it completes.
	Progress Progress
}

// Step is a node call the manager completed for a use.
type Step int

const (
	// StepStaged: NodeStageVolume succeeded (the volume is staged on the
	// node); told only by the Publish that staged it.
	StepStaged Step = iota + 1
	// StepPublished: NodePublishVolume succeeded for the user.
	StepPublished
	// StepUnpublished: NodeUnpublishVolume succeeded for the user.
	StepUnpublished
	// StepUnstaged: NodeUnstageVolume succeeded (the user was the
	// volume's last on the node).
	StepUnstaged
)

func (s Step) String() string {
	switch s {
	case StepStaged:
		return "staged"
	case StepPublished:
		return "published"
	case StepUnpublished:
		return "unpublished"
	case StepUnstaged:
		return "unstaged"
	}
	return fmt.Sprintf("step(%d)", int(s))
}

// Progress is told a step with the manager's clock reading when its call
// returned, and the host path it concerns (the staging path, or the
// user's publish path). It is called with the volume's lock held, so it
// must not call the manager back; the volume hook records task events
// with it, whose times show where a publish or a teardown spent its time.
type Progress func(step Step, at time.Time, path string)

func (p Progress) tell(step Step, at time.Time, path string) {
	if p != nil {
		p(step, at, path)
	}
}

// capability is the CSI volume capability of the request: the volume's
// mount options, each field overridden by the claim's when it sets one.
func (r *PublishRequest) capability() *csipb.VolumeCapability {
	mount := &pb.MountOptions{FsType: r.Volume.GetMountOptions().GetFsType(), MountFlags: r.Volume.GetMountOptions().GetMountFlags()}
	if o := r.MountOptions; o != nil {
		if o.GetFsType() != "" {
			mount.FsType = o.GetFsType()
		}
		if len(o.GetMountFlags()) > 0 {
			mount.MountFlags = o.GetMountFlags()
		}
	}
	return rules.CSICapability(r.AccessMode, r.AttachmentMode, mount)
}

// Publish stages the volume on the node if the plugin stages and it is not
// staged yet, publishes it for the user unless it is published already,
// and returns the user's publish path (PublishPath). The use is recorded
// before any call; a Publish that fails leaves it for Unpublish to take
// down. Calls retry uncertain errors until ctx ends.
func (m *Manager) Publish(ctx context.Context, req PublishRequest) (string, error) {
	v := req.Volume
	volumeID, pluginID := v.GetId(), v.GetPluginId()
	for _, c := range []struct{ what, s string }{{"volume id", volumeID}, {"plugin id", pluginID}, {"user", req.User}} {
		if err := checkName(c.what, c.s); err != nil {
			return "", fmt.Errorf("publishing volume %q for %s on node %s: %w", volumeID, who(req.User, req.Operator), m.cfg.NodeID, err)
		}
	}
	where := fmt.Sprintf("volume %q, %s, node %s", volumeID, who(req.User, req.Operator), m.cfg.NodeID)
	unlock, err := m.lock(ctx, volumeID)
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	defer unlock()

	rec := m.record(volumeID)
	if rec == nil {
		rec = &pb.VolumeUsageRecord{VolumeId: volumeID, PluginId: pluginID, ExternalId: v.GetExternalId()}
	}
	if rec.GetPluginId() != pluginID {
		return "", fmt.Errorf("%s: %w: held through plugin %q, asked through %q", where, ErrPluginMismatch, rec.GetPluginId(), pluginID)
	}
	userPath := PublishPath(m.cfg.DataDir, req.User, volumeID)
	i, use := findUse(rec, req.User)
	switch use.GetState() {
	case pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED:
		// Published by this client before it restarted, or by an earlier
		// call: the plugin is not asked again.
		return userPath, nil
	case pb.VolumeUseState_VOLUME_USE_STATE_UNPUBLISHING:
		return "", fmt.Errorf("%s: %w", where, ErrTearingDown)
	}

	// Which plugin instance is asked decides the staging: looked up once
	// here (the hook waited for it already), and again before each try.
	p, err := m.cfg.Plugins.WaitNode(ctx, pluginID)
	if err != nil {
		return "", fmt.Errorf("%s: waiting for the node plugin %q: %w", where, pluginID, err)
	}
	target := TargetPath(m.cfg.DataDir, pluginID, req.User, volumeID)
	if use == nil {
		use = &pb.VolumeUse{User: req.User, Operator: req.Operator}
		rec.Uses = append(rec.Uses, use)
		i = len(rec.Uses) - 1
	}
	use.State, use.TargetPath, use.ReadOnly = pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHING, target, req.ReadOnly
	use.PluginTargetPath = pluginView(m.cfg.DataDir, pluginID, p.StagePublishDir, target)
	use.UpdatedAt = m.cfg.Now().UnixNano()
	rec.Uses[i] = use
	staged := rec.GetStageState() == pb.VolumeStageState_VOLUME_STAGE_STATE_STAGED
	if p.StageUnstage && !staged {
		staging := StagingPath(m.cfg.DataDir, pluginID, volumeID)
		rec.StageState, rec.StagingPath = pb.VolumeStageState_VOLUME_STAGE_STATE_STAGING, staging
		rec.PluginStagingPath = pluginView(m.cfg.DataDir, pluginID, p.StagePublishDir, staging)
	}
	// Written before any call: a client that dies during them knows to
	// call again, or to undo.
	if err := m.save(rec); err != nil {
		return "", err
	}
	capability := req.capability()
	if rec.GetStageState() == pb.VolumeStageState_VOLUME_STAGE_STATE_STAGING {
		// The CO creates the staging directory (CSI spec); 0755 so a task
		// of another user reaches what is mounted under it.
		if err := os.MkdirAll(rec.GetStagingPath(), 0o755); err != nil {
			return "", fmt.Errorf("%s: creating the staging directory: %w", where, err)
		}
		err := m.call(ctx, csi.CallNodeStageVolume, pluginID, volumeID, func(ctx context.Context, p Plugin) error {
			_, err := p.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
				VolumeId: rec.GetExternalId(), PublishContext: req.PublishContext, StagingTargetPath: rec.GetPluginStagingPath(),
				VolumeCapability: capability, Secrets: v.GetSecrets(), VolumeContext: v.GetContext()})
			return err
		})
		if err != nil {
			return "", fmt.Errorf("%s: staging: %w", where, err)
		}
		stagedAt := m.cfg.Now()
		rec.StageState = pb.VolumeStageState_VOLUME_STAGE_STATE_STAGED
		if err := m.save(rec); err != nil {
			return "", err
		}
		req.Progress.tell(StepStaged, stagedAt, rec.GetStagingPath())
	}
	// The CO creates the target's parent; the plugin creates the target.
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", fmt.Errorf("%s: creating the publish directory: %w", where, err)
	}
	err = m.call(ctx, csi.CallNodePublishVolume, pluginID, volumeID, func(ctx context.Context, p Plugin) error {
		_, err := p.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
			VolumeId: rec.GetExternalId(), PublishContext: req.PublishContext, StagingTargetPath: rec.GetPluginStagingPath(),
			TargetPath: use.GetPluginTargetPath(), VolumeCapability: capability, Readonly: req.ReadOnly,
			Secrets: v.GetSecrets(), VolumeContext: v.GetContext()})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("%s: publishing: %w", where, err)
	}
	published := m.cfg.Now()
	if err := linkPublishPath(userPath, target); err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	use.State, use.UpdatedAt = pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED, published.UnixNano()
	rec.Uses[i] = use
	if err := m.save(rec); err != nil {
		return "", err
	}
	req.Progress.tell(StepPublished, published, userPath)
	m.logger.Debug("volume published", "volume_id", volumeID, "user", req.User, "operator", req.Operator, "path", userPath)
	return userPath, nil
}

// linkPublishPath makes link a symlink to target, replacing whatever
// link was (a link of an earlier attempt), and durable (publish_durable.go).
func linkPublishPath(link, target string) error {
	created := missingDirs(filepath.Dir(link))
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("creating the publish path's directory: %w", err)
	}
	if cur, err := os.Readlink(link); err != nil || cur != target {
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("replacing the publish path %s: %w", link, err)
		}
		if err := os.Symlink(target, link); err != nil {
			return fmt.Errorf("linking the publish path %s to %s: %w", link, target, err)
		}
	}
	return syncLinkDirs(link, created)
}
