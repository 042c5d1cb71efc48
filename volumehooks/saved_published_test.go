package volumehooks

import (
	"os"
	"path/filepath"

	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/rpc/pb"
)

// savePublished leaves what a client that published user's use of volID
// leaves on disk: the use saved PUBLISHED and its publish path, a symlink
// to its target (a use saved PUBLISHED without its path is a teardown under
// way; see volumemanager's teardown_marker.go).
func (e *volEnv) savePublished(user string, operator bool) {
	e.t.Helper()
	target := volumemanager.TargetPath(e.dir, "hostpath", user, volID)
	if err := e.usage.PutVolumeUsage(&pb.VolumeUsageRecord{VolumeId: volID, PluginId: "hostpath", ExternalId: "ext-1",
		Uses: []*pb.VolumeUse{{User: user, Operator: operator, State: pb.VolumeUseState_VOLUME_USE_STATE_PUBLISHED, TargetPath: target}}}); err != nil {
		e.t.Fatal(err)
	}
	link := volumemanager.PublishPath(e.dir, user, volID)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		e.t.Fatal(err)
	}
}
