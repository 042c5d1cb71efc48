//go:build linux

package hostpath

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/internal/testutil"
)

func requireRoot(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "the node service bind-mounts and attaches loop devices")
}

// requireLoopDevices ends the test through testutil.Unavailable when this
// host cannot attach loop devices (not root, or a container without
// /dev/loop-control).
func requireLoopDevices(t *testing.T) {
	t.Helper()
	requireRoot(t)
	if err := loopAvailable(); err != nil {
		testutil.Unavailable(t, "block volumes need loop devices: %v", err)
	}
}

// mountCount counts the mounts stacked at path.
func mountCount(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	points, err := parseMountInfo(f)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range points {
		if p == path {
			n++
		}
	}
	return n
}

// nodeFixture is a monolith plugin with paths for staging and targets, all
// unmounted when the test ends even if it fails half-way.
type nodeFixture struct {
	*plugin
	state, dir, staging string
}

func newNodeFixture(t *testing.T, cfg Config) *nodeFixture {
	t.Helper()
	requireRoot(t)
	f := &nodeFixture{state: t.TempDir(), dir: t.TempDir()}
	f.staging = filepath.Join(f.dir, "staging")
	if err := os.Mkdir(f.staging, 0o750); err != nil {
		t.Fatal(err)
	}
	cfg.StateDir = f.state
	if cfg.NodeID == "" {
		cfg.NodeID = "n1"
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(f.dir)
		for _, e := range entries {
			_ = unmountAll(filepath.Join(f.dir, e.Name()))
		}
		for _, dev := range leakedLoops(f.state) {
			t.Errorf("loop device %s still bound to an image in %s", dev, f.state)
			_ = detachLoop(dev)
		}
	})
	f.plugin = startPlugin(t, cfg)
	return f
}

// leakedLoops lists loop devices bound to files under dir.
func leakedLoops(dir string) []string {
	var out []string
	entries, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err == nil && strings.HasPrefix(string(b), dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(e))))
		}
	}
	return out
}

func (f *nodeFixture) publishController(t *testing.T, vol string, c *csi.VolumeCapability, ro bool) map[string]string {
	t.Helper()
	resp, err := f.ctrl.ControllerPublishVolume(testCtx(t), &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "n1", VolumeCapability: c, Readonly: ro})
	if err != nil {
		t.Fatal(err)
	}
	return resp.PublishContext
}

func (f *nodeFixture) stage(t *testing.T, vol string, c *csi.VolumeCapability, pc map[string]string) error {
	_, err := f.node.NodeStageVolume(testCtx(t), &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: f.staging, VolumeCapability: c, PublishContext: pc})
	return err
}

func (f *nodeFixture) publish(t *testing.T, vol, target string, c *csi.VolumeCapability, pc map[string]string, ro bool) error {
	_, err := f.node.NodePublishVolume(testCtx(t), &csi.NodePublishVolumeRequest{VolumeId: vol, TargetPath: target, StagingTargetPath: f.staging,
		VolumeCapability: c, PublishContext: pc, Readonly: ro})
	return err
}

func (f *nodeFixture) unpublish(t *testing.T, vol, target string) error {
	_, err := f.node.NodeUnpublishVolume(testCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: target})
	return err
}

func (f *nodeFixture) unstage(t *testing.T, vol string) error {
	_, err := f.node.NodeUnstageVolume(testCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: f.staging})
	return err
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestNodeMountLifecycle(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snw, "nodev")
	vol := f.createVolume(t, "m", 64*mib, c).VolumeId
	pc := f.publishController(t, vol, c, false)
	t1, t2, t3 := filepath.Join(f.dir, "t1"), filepath.Join(f.dir, "t2"), filepath.Join(f.dir, "t3")

	for range 2 {
		must(t, f.stage(t, vol, c, pc), "stage")
		must(t, f.publish(t, vol, t1, c, pc, false), "publish t1")
	}
	if n := mountCount(t, f.staging); n != 1 {
		t.Fatalf("%d mounts at the staging path after repeated stages, want 1", n)
	}
	if n := mountCount(t, t1); n != 1 {
		t.Fatalf("%d mounts at t1 after repeated publishes, want 1", n)
	}
	must(t, os.WriteFile(filepath.Join(t1, "blob"), make([]byte, mib), 0o644), "write through t1")
	if fi, err := os.Stat(filepath.Join(f.state, "volumes", vol, "data", "blob")); err != nil || fi.Size() != mib {
		t.Fatalf("file written through the target is not in the volume: %v", err)
	}
	var st unix.Statfs_t
	must(t, unix.Statfs(t1, &st), "statfs t1")
	if st.Flags&unix.ST_NODEV == 0 {
		t.Errorf("mount flag nodev not applied to t1 (flags %#x)", st.Flags)
	}

	must(t, f.publish(t, vol, t2, c, pc, true), "read-only publish at t2")
	if err := os.WriteFile(filepath.Join(t2, "x"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write through read-only target: %v, want EROFS", err)
	}
	wantCode(t, f.publish(t, vol, t3, c, pc, false), codes.FailedPrecondition, "second writable target of a SINGLE_NODE_WRITER volume")
	wantCode(t, f.publish(t, vol, t1, c, pc, true), codes.AlreadyExists, "same target, other readonly flag")
	wantCode(t, f.publish(t, vol, t3, mountCap(snw), pc, true), codes.FailedPrecondition, "second target with another capability")

	stats, err := f.node.NodeGetVolumeStats(testCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: t1})
	must(t, err, "stats")
	bytesUsage := stats.Usage[0]
	if bytesUsage.Unit != csi.VolumeUsage_BYTES || bytesUsage.Total != 64*mib || bytesUsage.Used < mib || bytesUsage.Available > 63*mib {
		t.Fatalf("byte usage %v after writing 1MiB to a 64MiB volume", bytesUsage)
	}

	wantCode(t, f.unstage(t, vol), codes.FailedPrecondition, "unstage while published")
	for range 2 {
		must(t, f.unpublish(t, vol, t1), "unpublish t1")
	}
	if _, err := os.Stat(t1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target t1 still exists after unpublish: %v", err)
	}
	must(t, f.unpublish(t, vol, t2), "unpublish t2")
	for range 2 {
		must(t, f.unstage(t, vol), "unstage")
	}
	if n := mountCount(t, f.staging); n != 0 {
		t.Fatalf("%d mounts left at the staging path", n)
	}
	if _, err := f.ctrl.ControllerUnpublishVolume(testCtx(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ctrl.DeleteVolume(testCtx(t), &csi.DeleteVolumeRequest{VolumeId: vol}); err != nil {
		t.Fatal(err)
	}
}

func TestNodeReadOnlyAttachment(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(mnmw)
	vol := f.createVolume(t, "ro", mib, c).VolumeId
	pc := f.publishController(t, vol, c, true)
	target := filepath.Join(f.dir, "t")
	must(t, f.stage(t, vol, c, pc), "stage")
	// The attachment is read-only: the node mounts read-only even when
	// NodePublishVolume does not ask for it.
	must(t, f.publish(t, vol, target, c, pc, false), "publish")
	if err := os.WriteFile(filepath.Join(target, "x"), []byte("x"), 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write to a volume attached read-only: %v, want EROFS", err)
	}
	must(t, f.unpublish(t, vol, target), "unpublish")
	must(t, f.unstage(t, vol), "unstage")
}

func TestNodeSurvivesRestart(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snw)
	vol := f.createVolume(t, "r", mib, c).VolumeId
	pc := f.publishController(t, vol, c, false)
	target := filepath.Join(f.dir, "t")
	must(t, f.stage(t, vol, c, pc), "stage")
	must(t, f.publish(t, vol, target, c, pc, false), "publish")

	f.plugin.stop()
	f.plugin = startPlugin(t, Config{NodeID: "n1", StateDir: f.state})
	must(t, f.publish(t, vol, target, c, pc, false), "publish again after restart")
	if n := mountCount(t, target); n != 1 {
		t.Fatalf("%d mounts at the target after restart and republish, want 1", n)
	}
	must(t, f.unpublish(t, vol, target), "unpublish after restart")
	must(t, f.unstage(t, vol), "unstage after restart")
	if mountCount(t, target)+mountCount(t, f.staging) != 0 {
		t.Fatal("mounts left after unpublish and unstage across a restart")
	}
}

func TestNodeAdoptsUnrecordedMounts(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snw)
	vol := f.createVolume(t, "crash", mib, c).VolumeId
	data := filepath.Join(f.state, "volumes", vol, "data")

	// A crash between mounting and recording leaves a mount with no record.
	must(t, bindMount(data, f.staging, mountFlags{}), "manual mount")
	must(t, f.stage(t, vol, c, nil), "stage over the unrecorded mount")
	if n := mountCount(t, f.staging); n != 1 {
		t.Fatalf("%d mounts at the staging path, want the adopted one only", n)
	}
	must(t, f.unstage(t, vol), "unstage")

	must(t, bindMount(data, f.staging, mountFlags{}), "manual mount")
	must(t, f.unstage(t, vol), "unstage without a record")
	if n := mountCount(t, f.staging); n != 0 {
		t.Fatalf("%d mounts left at the staging path after unstaging an unrecorded mount", n)
	}

	// A target showing another volume is not this volume's to unmount.
	other := f.createVolume(t, "other", mib, c).VolumeId
	target := filepath.Join(f.dir, "t")
	must(t, os.Mkdir(target, 0o750), "mkdir target")
	must(t, bindMount(data, target, mountFlags{}), "manual mount of the first volume")
	must(t, f.unpublish(t, other, target), "unpublish of another volume")
	if n := mountCount(t, target); n != 1 {
		t.Fatalf("unpublishing volume %s unmounted volume %s", other, vol)
	}
	must(t, f.unpublish(t, vol, target), "unpublish of the volume the target shows")
	if n := mountCount(t, target); n != 0 {
		t.Fatal("unrecorded target of the volume was not unmounted")
	}
}

func TestNodeBlockLifecycle(t *testing.T) {
	requireLoopDevices(t)
	f := newNodeFixture(t, Config{})
	c := blockCap(snw)
	vol := f.createVolume(t, "b", 4*mib, c).VolumeId
	image := filepath.Join(f.state, "volumes", vol, "disk.img")
	pc := f.publishController(t, vol, c, false)
	dev1, dev2 := filepath.Join(f.dir, "dev1"), filepath.Join(f.dir, "dev2")

	for range 2 {
		must(t, f.stage(t, vol, c, pc), "stage")
	}
	if loops := leakedLoops(f.state); len(loops) != 1 {
		t.Fatalf("loop devices after repeated stages: %v, want one", loops)
	}
	must(t, f.publish(t, vol, dev1, c, pc, false), "publish dev1")
	rw, err := os.OpenFile(dev1, os.O_RDWR, 0)
	must(t, err, "open dev1")
	if _, err := rw.WriteAt([]byte("berth"), mib); err != nil {
		t.Fatal(err)
	}
	must(t, rw.Sync(), "sync dev1")
	rw.Close()
	got := make([]byte, 5)
	img, err := os.Open(image)
	must(t, err, "open image")
	if _, err := img.ReadAt(got, mib); err != nil || !bytes.Equal(got, []byte("berth")) {
		t.Fatalf("image holds %q, %v; want what was written through the device", got, err)
	}
	img.Close()

	must(t, f.publish(t, vol, dev2, c, pc, true), "read-only publish dev2")
	if w, err := os.OpenFile(dev2, os.O_WRONLY, 0); err == nil {
		_, werr := w.WriteAt([]byte("x"), 0)
		w.Close()
		if werr == nil {
			t.Fatal("wrote through a read-only block publish")
		}
	}

	exp, err := f.ctrl.ControllerExpandVolume(testCtx(t), &csi.ControllerExpandVolumeRequest{VolumeId: vol, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}})
	if err != nil || exp.CapacityBytes != 8*mib || !exp.NodeExpansionRequired {
		t.Fatalf("controller expand: %v, %v", exp, err)
	}
	nexp, err := f.node.NodeExpandVolume(testCtx(t), &csi.NodeExpandVolumeRequest{VolumeId: vol, VolumePath: dev1, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}})
	if err != nil || nexp.CapacityBytes != 8*mib {
		t.Fatalf("node expand: %v, %v", nexp, err)
	}
	for _, d := range []string{dev1, dev2} {
		df, err := os.Open(d)
		must(t, err, "open "+d)
		size, err := df.Seek(0, io.SeekEnd)
		df.Close()
		if err != nil || size != 8*mib {
			t.Fatalf("%s is %d bytes after expansion, want %d", d, size, 8*mib)
		}
	}
	stats, err := f.node.NodeGetVolumeStats(testCtx(t), &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: dev1})
	if err != nil || stats.Usage[0].Total != 8*mib {
		t.Fatalf("block stats %v, %v", stats, err)
	}

	wantCode(t, f.unstage(t, vol), codes.FailedPrecondition, "unstage while published")
	must(t, f.unpublish(t, vol, dev1), "unpublish dev1")
	must(t, f.unpublish(t, vol, dev2), "unpublish dev2")
	for _, d := range []string{dev1, dev2} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("target %s still exists after unpublish: %v", d, err)
		}
	}
	must(t, f.unstage(t, vol), "unstage")
	if loops := leakedLoops(f.state); len(loops) != 0 {
		t.Fatalf("loop devices left after unstage: %v", loops)
	}
}

func TestNodeHealth(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snw)
	vol := f.createVolume(t, "h", mib, c).VolumeId
	must(t, f.stage(t, vol, c, nil), "stage")
	health := func() []*csi.VolumeHealth_VolumeHealthEntry {
		resp, err := f.node.NodeGetVolumeHealth(testCtx(t), &csi.NodeGetVolumeHealthRequest{VolumeId: vol, StagingTargetPath: f.staging})
		must(t, err, "volume health")
		return resp.VolumeHealth.HealthStatuses
	}
	if h := health(); len(h) != 0 {
		t.Fatalf("healthy staged volume reports %v", h)
	}
	must(t, os.WriteFile(filepath.Join(f.staging, "big"), make([]byte, 2*mib), 0o644), "overfill")
	if h := health(); len(h) != 1 || h[0].Reason != reasonCapacityExceeded {
		t.Fatalf("overfilled volume reports %v, want %s", h, reasonCapacityExceeded)
	}
	ch, err := f.ctrl.ControllerListVolumeHealth(testCtx(t), &csi.ControllerListVolumeHealthRequest{})
	if err != nil || len(ch.Entries) != 1 || ch.Entries[0].VolumeId != vol {
		t.Fatalf("controller health list %v, %v; want the overfilled volume", ch, err)
	}
	must(t, unmountAll(f.staging), "unmount behind the plugin's back")
	h := health()
	reasons := map[string]bool{}
	for _, e := range h {
		reasons[e.Reason] = true
	}
	if !reasons[reasonStagingMountMissing] {
		t.Fatalf("lost staging mount reports %v, want %s", h, reasonStagingMountMissing)
	}
	must(t, f.stage(t, vol, c, nil), "stage repairs the mount")
	if n := mountCount(t, f.staging); n != 1 {
		t.Fatalf("%d mounts at the staging path after the repairing stage", n)
	}
	must(t, f.unstage(t, vol), "unstage")
}

func TestNodeOccupiedPathsAndLostStaging(t *testing.T) {
	f := newNodeFixture(t, Config{})
	c := mountCap(snw)
	a := f.createVolume(t, "a", mib, c).VolumeId
	b := f.createVolume(t, "b", mib, c).VolumeId
	must(t, f.stage(t, a, c, nil), "stage a")
	wantCode(t, f.stage(t, b, c, nil), codes.FailedPrecondition, "stage b where a is staged")
	if n := mountCount(t, f.staging); n != 1 {
		t.Fatalf("%d mounts at the staging path, want a's only", n)
	}

	// A staging mount lost behind the plugin's back is restored before a
	// publish, so the target shows the volume and not an empty directory.
	must(t, unmountAll(f.staging), "unmount behind the plugin's back")
	target := filepath.Join(f.dir, "t")
	must(t, f.publish(t, a, target, c, nil, false), "publish a")
	must(t, os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644), "write through target")
	if _, err := os.Stat(filepath.Join(f.state, "volumes", a, "data", "f")); err != nil {
		t.Fatalf("write through the target did not reach the volume: %v", err)
	}
	must(t, f.unpublish(t, a, target), "unpublish")
	must(t, f.unstage(t, a), "unstage")
}
