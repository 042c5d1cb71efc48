//go:build linux

package volumemanager_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/csi"
	"berth.dev/berth/csi/volumemanager"
	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/rpc/pb"
)

type hostpathPlugins struct{ c *csi.Client }

func (p hostpathPlugins) WaitNode(context.Context, string) (volumemanager.Plugin, error) {
	return volumemanager.Plugin{Node: p.c.Node, StageUnstage: true}, nil
}

type store struct {
	recs map[string]*pb.VolumeUsageRecord
}

func (s *store) PutVolumeUsage(r *pb.VolumeUsageRecord) error {
	s.recs[r.GetVolumeId()] = proto.CloneOf(r)
	return nil
}
func (s *store) DeleteVolumeUsage(id string) error { delete(s.recs, id); return nil }
func (s *store) VolumeUsages() ([]*pb.VolumeUsageRecord, error) {
	var out []*pb.VolumeUsageRecord
	for _, r := range s.recs {
		out = append(out, r)
	}
	return out, nil
}

// mountsUnder lists the mount points under dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	return out
}

// Against the built-in hostpath plugin, which bind-mounts: two allocs of
// one volume share what is written through their publish paths (the
// symlinks tasks get), and after both are unpublished nothing is mounted
// under the data dir.
func TestHostpathTwoUsersShareAndLeaveNothingMounted(t *testing.T) {
	testutil.RequireRoot(t, "the hostpath plugin bind-mounts")
	base, err := os.MkdirTemp("", "vmhp")
	if err != nil {
		t.Fatal(err)
	}
	base, err = filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, mp := range mountsUnder(t, base) {
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
		os.RemoveAll(base)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := hostpath.Config{Endpoint: "unix://" + filepath.Join(base, "csi.sock"), NodeID: "node-1", StateDir: filepath.Join(base, "state"),
		Logger: testutil.Logger(t)}
	go func() { done <- hostpath.Run(pctx, cfg) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	c, err := csi.Dial(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := csi.Retry{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	if err := r.Do(ctx, csi.CallProbe, "", func(ctx context.Context) error { _, err := c.Identity.Probe(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	capability := &csipb.VolumeCapability{AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER}}
	created, err := c.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{Name: "shared", VolumeCapabilities: []*csipb.VolumeCapability{capability},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	ext := created.GetVolume().GetVolumeId()
	pub, err := c.Controller.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{VolumeId: ext, NodeId: "node-1",
		VolumeCapability: capability, VolumeContext: created.GetVolume().GetVolumeContext()})
	if err != nil {
		t.Fatal(err)
	}

	dataDir := filepath.Join(base, "data")
	m, err := volumemanager.New(volumemanager.Config{DataDir: dataDir, NodeID: "node-1", Store: &store{recs: map[string]*pb.VolumeUsageRecord{}},
		Plugins: hostpathPlugins{c}, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	vol := &pb.Volume{Id: "shared", PluginId: "hostpath", ExternalId: ext, Context: created.GetVolume().GetVolumeContext()}
	req := func(user string) volumemanager.PublishRequest {
		return volumemanager.PublishRequest{Volume: vol, User: user, AccessMode: pb.VolumeAccessMode_VOLUME_ACCESS_MODE_SINGLE_NODE_MULTI_WRITER,
			AttachmentMode: pb.VolumeAttachmentMode_VOLUME_ATTACHMENT_MODE_FILE_SYSTEM, PublishContext: pub.GetPublishContext()}
	}
	p1, err := m.Publish(ctx, req("a1"))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := m.Publish(ctx, req("a2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p1, "hello.txt"), []byte("from a1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(p2, "hello.txt")); err != nil || string(b) != "from a1" {
		t.Fatalf("a2 reads %q, %v through %s", b, err, p2)
	}
	if n := len(mountsUnder(t, dataDir)); n != 3 {
		t.Errorf("%d mounts under the data dir with two users, want 3 (staging, two targets): %v", n, mountsUnder(t, dataDir))
	}
	for _, u := range []string{"a1", "a2"} {
		if err := m.Unpublish(ctx, u, "shared", nil); err != nil {
			t.Fatal(err)
		}
	}
	if left := mountsUnder(t, dataDir); len(left) != 0 {
		t.Fatalf("mounts left after the last user: %v", left)
	}
	if _, err := os.Lstat(p1); !os.IsNotExist(err) {
		t.Errorf("publish path %s left: %v", p1, err)
	}
}
