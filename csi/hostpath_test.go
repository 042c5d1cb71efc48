//go:build linux

package csi_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/csi"
	"berth.dev/berth/internal/testutil"
)

// hostpathPlugin runs the built-in hostpath plugin in this process on a real
// unix socket, and can stop and restart it on the same state directory.
type hostpathPlugin struct {
	t      *testing.T
	cfg    hostpath.Config
	cancel context.CancelFunc
	done   chan error
}

func startHostpath(t *testing.T, dir string) *hostpathPlugin {
	h := &hostpathPlugin{t: t, cfg: hostpath.Config{
		Endpoint: "unix://" + filepath.Join(dir, "csi.sock"),
		NodeID:   "node-1",
		StateDir: filepath.Join(dir, "state"),
		// Debug, not trace: the plugin's trace-level request logging is its
		// own concern, not this client's.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "hostpath", Level: hclog.Debug, Output: tWriter{t}}),
	}}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *hostpathPlugin) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- hostpath.Run(ctx, h.cfg) }()
}

// stop ends the plugin's context and waits for Run to return.
func (h *hostpathPlugin) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("hostpath plugin: %v", err)
		}
	case <-time.After(2 * time.Minute):
		h.t.Fatal("hostpath plugin did not stop within 2 minutes of its context ending")
	}
}

// waitReady probes until the plugin answers ready, retrying while it starts.
func waitReady(t *testing.T, ctx context.Context, c *csi.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r := csi.Retry{Initial: 10 * time.Millisecond, Max: 250 * time.Millisecond, Logger: testLogger(t)}
	err := r.Do(ctx, csi.CallProbe, "", func(ctx context.Context) error {
		ready, err := c.Identity.Probe(ctx)
		if err == nil && !ready {
			return &csi.Error{Call: csi.CallProbe, Code: codes.Unavailable, Message: "not ready yet"}
		}
		return err
	})
	if err != nil {
		t.Fatalf("hostpath plugin never became ready: %v", err)
	}
}

// mountPoints returns the mount points of this process's mount namespace.
func mountPoints(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			out[unescapeMountinfo(fields[4])] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches whatever a failed test left mounted under dir, so
// that removing dir does not reach into a volume through a bind mount.
func unmountUnder(t *testing.T, dir string) {
	for mp := range mountPoints(t) {
		if strings.HasPrefix(mp, dir+"/") {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
				t.Errorf("cleanup: unmount %s: %v", mp, err)
			}
		}
	}
}

func TestHostpathVolumeCycle(t *testing.T) { volumeCycle(t, false) }

func TestHostpathVolumeCycleAcrossRestart(t *testing.T) { volumeCycle(t, true) }

// volumeCycle drives one volume through its whole life against the hostpath
// plugin over a real socket, checking the bind mounts at each step. With
// restart, the plugin is stopped once the volume is published and started
// again on the same state directory; the same client carries on.
func volumeCycle(t *testing.T, restart bool) {
	testutil.RequireRoot(t, "the hostpath volume cycle bind-mounts")
	dir, err := filepath.EvalSymlinks(socketDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountUnder(t, dir) })
	h := startHostpath(t, dir)
	c, err := csi.Dial(h.cfg.Endpoint, csi.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := testCtx(t)
	waitReady(t, ctx, c)

	fp, err := c.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fp.Info.Name != hostpath.PluginName || fp.Info.VendorVersion == "" {
		t.Errorf("plugin info %+v", fp.Info)
	}
	if fp.NodeInfo.GetNodeId() != "node-1" || !fp.Node.Has(csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		t.Fatalf("node %v %v", fp.NodeInfo, fp.Node)
	}
	if !fp.ControllerRequired() {
		t.Fatalf("hostpath advertises controller publish, yet ControllerRequired is false: %+v", fp)
	}

	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	caps := []*csipb.VolumeCapability{capability}
	created, err := c.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "cycle", VolumeCapabilities: caps, CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	vol := created.GetVolume()
	id := vol.GetVolumeId()

	v, err := c.Controller.ValidateVolumeCapabilities(ctx, &csipb.ValidateVolumeCapabilitiesRequest{
		VolumeId: id, VolumeContext: vol.GetVolumeContext(), VolumeCapabilities: caps,
	})
	if err != nil || !v.Confirmed {
		t.Fatalf("validation of the capability the volume was created with: %+v, %v", v, err)
	}

	published, err := c.Controller.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: fp.NodeInfo.GetNodeId(), VolumeCapability: capability, VolumeContext: vol.GetVolumeContext(),
	})
	if err != nil {
		t.Fatal(err)
	}
	publishCtx := published.GetPublishContext()
	staging := filepath.Join(dir, "staging", id)
	target := filepath.Join(dir, "publish", "alloc-1", id)
	if _, err := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, PublishContext: publishCtx, StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: vol.GetVolumeContext(),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, PublishContext: publishCtx, StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: capability, VolumeContext: vol.GetVolumeContext(),
	}); err != nil {
		t.Fatal(err)
	}
	mounts := mountPoints(t)
	if !mounts[staging] || !mounts[target] {
		t.Fatalf("after stage and publish: staging mounted %v, target mounted %v", mounts[staging], mounts[target])
	}
	const content = "written through the publish path"
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	checkVisible := func() {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(staging, "hello.txt"))
		if err != nil || string(got) != content {
			t.Fatalf("file written through %s, read through %s: %q, %v", target, staging, got, err)
		}
	}
	checkVisible()

	if restart {
		h.stop()
		if _, err := c.Identity.Probe(ctx); !errors.Is(err, csi.ErrPluginShutdown) {
			t.Errorf("probe of the stopped plugin: got %v, want ErrPluginShutdown", err)
		}
		h.start()
		waitReady(t, ctx, c)
		mounts = mountPoints(t)
		if !mounts[staging] || !mounts[target] {
			t.Fatalf("after plugin restart: staging mounted %v, target mounted %v", mounts[staging], mounts[target])
		}
		checkVisible()
	}

	if _, err := c.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if mountPoints(t)[target] {
		t.Fatalf("%s still mounted after NodeUnpublishVolume", target)
	}
	checkVisible() // the staging mount is untouched
	if _, err := c.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if mountPoints(t)[staging] {
		t.Fatalf("%s still mounted after NodeUnstageVolume", staging)
	}
	if _, err := os.Stat(filepath.Join(staging, "hello.txt")); err == nil {
		t.Errorf("the volume's file is still visible at %s after unstaging", staging)
	}
	if _, err := c.Controller.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: fp.NodeInfo.GetNodeId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Fatal(err)
	}
	if fp.Controller.Has(csipb.ControllerServiceCapability_RPC_GET_VOLUME) {
		if _, err := c.Controller.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id}); !csi.IsNotFound(err) || !csi.IsFinal(err) {
			t.Errorf("ControllerGetVolume of a deleted volume: got %v, want a final NotFound", err)
		}
	}
	// Undoing again is a no-op, whether the plugin answers OK or NotFound.
	if _, err := c.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Errorf("second NodeUnpublishVolume: %v", err)
	}
	if _, err := c.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Errorf("second NodeUnstageVolume: %v", err)
	}
	if _, err := c.Controller.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		t.Errorf("second DeleteVolume: %v", err)
	}
}
