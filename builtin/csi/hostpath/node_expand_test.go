//go:build linux

package hostpath

import (
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// A mount volume's size on the node follows the controller only through
// NodeExpandVolume: after ControllerExpandVolume (which asks for a node
// expansion) the node's stats still show the old size; NodeExpandVolume at
// the publish target or the staging path makes them show the new one, and
// is idempotent. More than the volume has is OutOfRange; a path the volume
// is not at, or a volume not staged here, is NotFound; a capability of
// another access type is InvalidArgument.
func TestNodeExpandMountVolume(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snw)
	vol := f.createVolume(t, "grow", 4*mib, c).VolumeId
	pc := f.publishController(t, vol, c, false)
	expand := func(path string, bytes int64, vc *csi.VolumeCapability) (*csi.NodeExpandVolumeResponse, error) {
		return f.node.NodeExpandVolume(testCtx(t), &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: path, StagingTargetPath: f.staging,
			CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}, VolumeCapability: vc})
	}
	_, err := expand(f.staging, 4*mib, c)
	wantCode(t, err, codes.NotFound, "expand before stage")

	must(t, f.stage(t, vol, c, pc), "stage")
	target := filepath.Join(f.dir, "t1")
	must(t, f.publish(t, vol, target, c, pc, false), "publish")
	total := func() int64 {
		t.Helper()
		st, err := f.node.NodeGetVolumeStats(testCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: target})
		must(t, err, "stats")
		return st.Usage[0].Total
	}
	exp, err := f.ctrl.ControllerExpandVolume(testCtx(t), &csi.ControllerExpandVolumeRequest{VolumeId: vol, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}})
	if err != nil || exp.CapacityBytes != 8*mib || !exp.NodeExpansionRequired {
		t.Fatalf("controller expand: %v, %v; want 8MiB and a node expansion required", exp, err)
	}
	if got := total(); got != 4*mib {
		t.Fatalf("the node sees %d bytes before its expansion, want %d", got, 4*mib)
	}
	_, err = expand(target, 16*mib, c)
	wantCode(t, err, codes.OutOfRange, "node expand beyond the volume")
	_, err = expand(target, 8*mib, blockCap(snw))
	wantCode(t, err, codes.InvalidArgument, "node expand with a block capability")
	_, err = expand(filepath.Join(f.dir, "elsewhere"), 8*mib, c)
	wantCode(t, err, codes.NotFound, "node expand at a path the volume is not at")
	for _, path := range []string{target, f.staging} {
		got, err := expand(path, 8*mib, c)
		if err != nil || got.CapacityBytes != 8*mib {
			t.Fatalf("node expand at %s: %v, %v", path, got, err)
		}
		if got := total(); got != 8*mib {
			t.Fatalf("the node sees %d bytes after its expansion at %s, want %d", got, path, 8*mib)
		}
	}
	must(t, f.unpublish(t, vol, target), "unpublish")
	must(t, f.unstage(t, vol), "unstage")
}
