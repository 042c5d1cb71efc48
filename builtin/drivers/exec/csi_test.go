package execdriver_test

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"berth.dev/berth/builtin/csi/hostpath"
	"berth.dev/berth/csi"
	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// csiPluginEnv marks this test binary run as the hostpath CSI plugin
// inside an exec task (it is what `berth builtin csi-hostpath` runs).
const csiPluginEnv = "EXEC_TEST_CSI_HOSTPATH"

// csiPluginIfRequested serves the hostpath plugin until SIGTERM when this
// binary was started as one.
func csiPluginIfRequested() {
	if os.Getenv(csiPluginEnv) != "1" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := hostpath.Run(ctx, hostpath.Config{
		Endpoint: os.Getenv("CSI_ENDPOINT"), NodeID: "node-1", StateDir: "/state",
	})
	if err != nil {
		os.Stderr.WriteString("hostpath: " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Exit(0)
}

// TestCSIPluginAsExecTask: the hostpath CSI plugin runs as an exec task
// with its socket directory and its mount directory mounted
// bidirectionally; over its unix socket the host stages and publishes a
// volume, the plugin's mounts (made in the task's mount namespace) appear
// on the host, what the host writes through the publish path lands in the
// volume, and another exec task given the publish path as a mount reads it.
func TestCSIPluginAsExecTask(t *testing.T) {
	d := client(t)
	host := t.TempDir()
	sockDir, mnt, state := filepath.Join(host, "plugin"), filepath.Join(host, "mnt"), filepath.Join(host, "state")
	for _, dir := range []string{sockDir, mnt, state} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { unmountUnder(t, host) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plugin := taskCfg(t, "csi-plugin", sdk.ConfigMap{
		"command": sdk.StringValue("/plugin/exec.test"),
		// The plugin mounts volumes.
		"cap_add": sdk.ListValue("SYS_ADMIN"),
	})
	plugin.Env[csiPluginEnv] = "1"
	plugin.Env["CSI_ENDPOINT"] = "unix:///csi/csi.sock"
	bidi := driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
	plugin.Mounts = []*driverpb.Mount{
		{HostPath: exe, TaskPath: "/plugin/exec.test", ReadOnly: true},
		{HostPath: sockDir, TaskPath: "/csi", Propagation: bidi},
		// At the same path inside as outside, so the paths berth names in
		// CSI calls are valid in the plugin's namespace.
		{HostPath: mnt, TaskPath: mnt, Propagation: bidi},
		{HostPath: state, TaskPath: "/state"},
	}
	start(t, d, plugin)
	t.Cleanup(func() { d.StopTask(context.Background(), plugin.GetId(), 10*time.Second, "SIGTERM") })

	sock := filepath.Join(sockDir, "csi.sock")
	waitFile(t, sock)
	c, err := csi.Dial("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	waitFor(t, "the plugin to answer Probe", func() bool { ready, err := c.Identity.Probe(ctx); return err == nil && ready })

	capability := &csipb.VolumeCapability{
		AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{}},
		AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
	created, err := c.Controller.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name: "exec-task-volume", VolumeCapabilities: []*csipb.VolumeCapability{capability},
		CapacityRange: &csipb.CapacityRange{RequiredBytes: 1 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	vol := created.GetVolume()
	id := vol.GetVolumeId()
	published, err := c.Controller.ControllerPublishVolume(ctx, &csipb.ControllerPublishVolumeRequest{
		VolumeId: id, NodeId: "node-1", VolumeCapability: capability, VolumeContext: vol.GetVolumeContext(),
	})
	if err != nil {
		t.Fatal(err)
	}
	staging, target := filepath.Join(mnt, "staging", id), filepath.Join(mnt, "publish", id)
	if _, err := c.Node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, PublishContext: published.GetPublishContext(), StagingTargetPath: staging,
		VolumeCapability: capability, VolumeContext: vol.GetVolumeContext(),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, PublishContext: published.GetPublishContext(), StagingTargetPath: staging, TargetPath: target,
		VolumeCapability: capability, VolumeContext: vol.GetVolumeContext(),
	}); err != nil {
		t.Fatal(err)
	}
	if m := mountPoints(t); !m[staging] || !m[target] {
		t.Fatalf("the plugin's stage and publish mounts did not reach the host: staging %v, target %v", m[staging], m[target])
	}
	const content = "written by the host through the publish path"
	if err := os.WriteFile(filepath.Join(target, "hello.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if where := findFile(t, state, "hello.txt"); where == "" {
		t.Errorf("the file written to the publish path is not in the plugin's volume under %s", state)
	}

	reader := taskCfg(t, "csi-reader", sh(`cat /data/hello.txt`))
	reader.Mounts = []*driverpb.Mount{{HostPath: target, TaskPath: "/data", ReadOnly: true}}
	start(t, d, reader)
	if res := wait(t, d, reader.GetId()); res.GetExitCode() != 0 || stdout(t, reader) != content {
		t.Errorf("another task reading the published volume: %v, output %q; want %q", res, stdout(t, reader), content)
	}

	if _, err := c.Node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	if m := mountPoints(t); m[staging] || m[target] {
		t.Errorf("the plugin's unmounts did not reach the host: staging %v, target %v", m[staging], m[target])
	}
	var ce *csi.Error
	if _, err := c.Controller.ControllerUnpublishVolume(ctx, &csipb.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "node-1"}); err != nil && !(errors.As(err, &ce) && ce.Code == codes.NotFound) {
		t.Fatal(err)
	}
}

// findFile returns the path of the first file named name under dir.
func findFile(t *testing.T, dir, name string) string {
	t.Helper()
	var found string
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() && e.Name() == name && found == "" {
			found = p
		}
		return nil
	})
	return found
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
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			out[fields[4]] = true
		}
	}
	return out
}

// unmountUnder detaches whatever a failed test left mounted under dir.
func unmountUnder(t *testing.T, dir string) {
	for mp := range mountPoints(t) {
		if strings.HasPrefix(mp, dir+"/") {
			syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
}
