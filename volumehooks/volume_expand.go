package volumehooks

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/rules"
	"berth.dev/berth/rpc/pb"
)

// EventVolumeExpanded is the task event of a node expansion made when the
// volume was staged and published for the alloc.
const EventVolumeExpanded = "Volume expanded"

// expandPending makes the node expansion vol has pending
// (Volume.node_expansion_pending_bytes: volume expand found no node
// holding the volume, or a node failed) once it is staged and published
// here: NodeExpandVolume for that size, at the volume's path on this node.
// It answers the size expanded, for the in-use report to carry; 0 when
// none is pending, or when the node plugin cannot expand (logged: the
// expansion stays pending). events, when set, is told as a task event.
func (v *VolumeHooks) expandPending(ctx context.Context, vol *pb.Volume, claim *pb.Claim, events eventEmitter, what string) (int64, error) {
	want := vol.GetNodeExpansionPendingBytes()
	if want <= 0 {
		return 0, nil
	}
	req := &csipb.NodeExpandVolumeRequest{CapacityRange: &csipb.CapacityRange{RequiredBytes: want},
		VolumeCapability: rules.CSICapability(claim.GetAccessMode(), claim.GetAttachmentMode(), vol.GetMountOptions()),
		Secrets:          vol.GetSecrets()}
	res, err := v.cfg.Volumes.Expand(ctx, vol.GetId(), vol.GetPluginId(), req)
	if errors.Is(err, volumemanager.ErrNoNodeExpand) {
		v.logger.Warn("volume has a node expansion pending that its node plugin cannot make", "volume_id", vol.GetId(), "bytes", want, "error", err)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("expanding it on the node to %d bytes (pending since volume expand): %w", want, err)
	}
	emit(events, v.cfg.Now(), EventVolumeExpanded, fmt.Sprintf("%s expanded on the node to %d bytes at %s", what, want, res.VolumePath), false)
	return want, nil
}
