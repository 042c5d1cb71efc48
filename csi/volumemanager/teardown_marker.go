package volumemanager

import (
	"os"

	"google.golang.org/protobuf/proto"

	"berth.dev/berth/rpc/pb"
)

// A teardown writes nothing before its calls. What says on disk that a
// use's teardown began is its publish path: the symlink is made, and made
// durable (its directory fsynced, publish_durable.go), before the use is
// saved PUBLISHED, and removed before NodeUnpublishVolume, so a use
// saved PUBLISHED whose path is gone was being taken down when the client
// stopped. New reads such a use as UNPUBLISHING (markTearingDown), and the
// rest follows as if that state had been written: Publish refuses it
// (ErrTearingDown), the volume hook's recovery does not take it for
// published, and the next Unpublish (an alloc's Postrun, Sweep) calls
// NodeUnpublishVolume again, which is idempotent, and unstages.
//
// The same teardown saves nothing between its unpublish and its unstage
// when the use was the volume's last (the unstage follows at once): the
// record is removed after NodeUnstageVolume, one state DB commit for the
// whole teardown instead of three. A client stopped in between finds the
// use as above and unpublishes again before unstaging.
//
// The removal of the path is not fsynced: after a power loss it may be
// undone, but so is every mount the teardown was taking down, and the
// use reads as a published use after a reboot, as any other does.

// markTearingDown sets UNPUBLISHING on the uses of recs saved PUBLISHED
// whose publish path under dataDir is gone, and reports how many.
func markTearingDown(dataDir string, recs []*pb.VolumeUsageRecord) int {
	n := 0
	for _, rec := range recs {
		for _, u := range rec.GetUses() {
			if u.GetState() != pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED {
				continue
			}
			if _, err := os.Lstat(PublishPath(dataDir, u.GetUser(), rec.GetVolumeId())); os.IsNotExist(err) {
				u.State = pb.VolumeUseState_VOLUME_USE_STATE_UNPUBLISHING
				n++
			}
		}
	}
	return n
}

// remember makes rec the manager's record without saving it: a state the
// state DB need not hold, because a restart derives it (see above).
func (m *Manager) remember(rec *pb.VolumeUsageRecord) {
	m.mu.Lock()
	m.usage[rec.GetVolumeId()] = proto.CloneOf(rec)
	m.mu.Unlock()
}
