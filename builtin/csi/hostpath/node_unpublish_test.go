//go:build linux

package hostpath

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// NodeUnpublishVolume that removes its target writes no record: the
// target's absence says it is unpublished, and everything that reads the
// record reads it so. A SINGLE_NODE_SINGLE_WRITER volume is published at
// a second target once the first is unpublished, stats and health say the
// first is not published, and the next write of the record leaves it out.
func TestNodeUnpublishRecordsByRemovingTheTarget(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snsw)
	vol := f.createVolume(t, "u", 16*mib, c).VolumeId
	pc := f.publishController(t, vol, c, false)
	t1, t2 := filepath.Join(f.dir, "t1"), filepath.Join(f.dir, "t2")
	must(t, f.stage(t, vol, c, pc), "stage")
	must(t, f.publish(t, vol, t1, c, pc, false), "publish t1")
	recPath := layout{root: f.state}.nodeVolumeFile("n1", vol)
	before, err := os.ReadFile(recPath)
	must(t, err, "read the node record")

	must(t, f.unpublish(t, vol, t1), "unpublish t1")
	if after, err := os.ReadFile(recPath); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("node record rewritten by the unpublish (err %v):\n%s\nwant as it was:\n%s", err, after, before)
	}
	if _, err := os.Lstat(t1); !os.IsNotExist(err) {
		t.Fatalf("target t1 after the unpublish: %v, want it removed", err)
	}
	_, err = f.node.NodeGetVolumeStats(testCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: t1})
	wantCode(t, err, codes.NotFound, "stats at the unpublished target")
	must(t, f.unpublish(t, vol, t1), "unpublish t1 again")

	must(t, f.publish(t, vol, t2, c, pc, false), "publish t2 (SINGLE_NODE_SINGLE_WRITER, t1 unpublished)")
	rec := &nodeVolumeRecord{}
	must(t, readRecord(recPath, rec), "read the node record")
	var targets []string
	for p := range rec.Targets {
		targets = append(targets, p)
	}
	if !slices.Equal(targets, []string{t2}) {
		t.Fatalf("recorded targets %v, want [%s]", targets, t2)
	}
	must(t, f.unpublish(t, vol, t2), "unpublish t2")
	must(t, f.unstage(t, vol), "unstage")
}

// A plugin killed in NodeUnpublishVolume after the unmount and before the
// target's removal leaves the target recorded, there and unmounted: it is
// still recorded (a publish at another target of a single-writer volume
// is refused), and NodeUnpublishVolume called again removes it, after
// which the volume unstages.
func TestNodeUnpublishKilledBeforeTheTargetsRemovalIsFinishedByTheNextCall(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snsw)
	vol := f.createVolume(t, "k", 16*mib, c).VolumeId
	pc := f.publishController(t, vol, c, false)
	t1, t2 := filepath.Join(f.dir, "t1"), filepath.Join(f.dir, "t2")
	must(t, f.stage(t, vol, c, pc), "stage")
	must(t, f.publish(t, vol, t1, c, pc, false), "publish t1")
	must(t, unix.Unmount(t1, 0), "unmount t1 as the killed call did")

	wantCode(t, f.publish(t, vol, t2, c, pc, false), codes.FailedPrecondition, "publish t2 while t1 is recorded and there")
	must(t, f.unpublish(t, vol, t1), "unpublish t1 again")
	if _, err := os.Lstat(t1); !os.IsNotExist(err) {
		t.Fatalf("target t1 after the second unpublish: %v, want it removed", err)
	}
	must(t, f.unstage(t, vol), "unstage")
	if n := mountCount(t, f.staging); n != 0 {
		t.Fatalf("%d mounts left at the staging path", n)
	}
}
