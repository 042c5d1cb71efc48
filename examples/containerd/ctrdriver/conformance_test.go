package ctrdriver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
)

// testNamespace is the containerd namespace the tests use.
const testNamespace = "berth-test"

func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return ctrdriver.New(l) })
	code := m.Run()
	stopPrivateContainerd()
	removeArchive()
	os.Exit(code)
}

func pluginConfig(addr string) sdk.ConfigMap {
	return sdk.ConfigMap{"address": sdk.StringValue(addr), "namespace": sdk.StringValue(testNamespace),
		"allow_privileged": sdk.BoolValue(true), "allow_host_mounts": sdk.BoolValue(true),
		"allow_devices": sdk.BoolValue(true), "allow_caps": sdk.ListValue("all")}
}

// prog is a task config running taskprog with args from the test image
// archive; the host's temp dir is bound at the same path, so the harness's
// ready file (in a test temp dir) is where the task looks for it.
func prog(archive string, args ...string) sdk.ConfigMap {
	tmp := os.TempDir()
	return sdk.ConfigMap{
		"image":  sdk.StringValue(testImage),
		"load":   sdk.StringValue(archive),
		"args":   sdk.ListValue(args...),
		"mounts": sdk.ListValue(tmp + ":" + tmp),
	}
}

func cases(archive string) drivertest.Cases {
	return drivertest.Cases{
		ExitCode:         func(code int) sdk.ConfigMap { return prog(archive, "exit", fmt.Sprint(code)) },
		RunUntilStopped:  func() sdk.ConfigMap { return prog(archive, "run") },
		IgnoreStopSignal: func() sdk.ConfigMap { return prog(archive, "ignore") },
		ExitAfter: func(code int, d time.Duration) sdk.ConfigMap {
			return prog(archive, "sleep", d.String(), fmt.Sprint(code))
		},
		BadConfigs: []drivertest.BadConfig{
			{Config: sdk.ConfigMap{}, Key: "image"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue("UPPER/Case")}, Key: "image"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "load": sdk.StringValue("relative.tar")}, Key: "load"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "mounts": sdk.ListValue("/tmp")}, Key: "mounts"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "mounts": sdk.ListValue("/tmp:/x:rshared,bogus")}, Key: "mounts"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "cap_add": sdk.ListValue("CAP_NOPE")}, Key: "cap_add"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "devices": sdk.ListValue("/dev/fuse:/dev/fuse:rwx")}, Key: "devices"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "working_dir": sdk.StringValue("rel")}, Key: "working_dir"},
			{Config: sdk.ConfigMap{"image": sdk.StringValue(testImage), "privileged": sdk.StringValue("yes")}, Key: "privileged"},
		},
		MountsSeen: mountsSeen,
		ReadyFile:  true,
	}
}

// TestConformance runs the sdk's driver harness against the driver (this
// test binary as the plugin) and a real containerd.
func TestConformance(t *testing.T) {
	addr := containerdAddress(t)
	drivertest.Run(t, drivertest.Harness{PluginConfig: pluginConfig(addr), Cases: cases(imageArchive(t))})
}

// TestConformanceBuiltBinary runs the harness against the plugin binary
// built the way `make plugins` builds it.
func TestConformanceBuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	addr := containerdAddress(t)
	bin := filepath.Join(t.TempDir(), "containerd")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	drivertest.Run(t, drivertest.Harness{
		Command:      func() *exec.Cmd { return exec.Command(bin) },
		PluginConfig: pluginConfig(addr),
		Cases:        cases(imageArchive(t)),
	})
}

// mountsSeen reads the container's mount table from the host
// (/proc/PID/mountinfo of its process): each of cfg's mounts must be
// mounted at its task path with the propagation its optional fields show
// (shared = bidirectional, master only = host-to-task, none = private),
// and show the host directory's marker file through /proc/PID/root.
func mountsSeen(ctx context.Context, d sdk.Driver, cfg *driverpb.TaskConfig) ([]*driverpb.Mount, error) {
	st, err := d.InspectTask(ctx, cfg.GetId())
	if err != nil {
		return nil, err
	}
	pid := st.GetAttributes()["pid"]
	entries, err := procMounts(pid)
	if err != nil {
		return nil, err
	}
	var seen []*driverpb.Mount
	for _, want := range cfg.GetMounts() {
		e, ok := entries[filepath.Clean(want.GetTaskPath())]
		if !ok {
			continue
		}
		m := &driverpb.Mount{TaskPath: want.GetTaskPath(), ReadOnly: e.readOnly, Propagation: e.propagation}
		inside, err1 := os.ReadFile(filepath.Join("/proc", pid, "root", want.GetTaskPath(), "drivertest-mount"))
		outside, err2 := os.ReadFile(filepath.Join(want.GetHostPath(), "drivertest-mount"))
		if err1 == nil && err2 == nil && string(inside) == string(outside) {
			m.HostPath = want.GetHostPath()
		}
		seen = append(seen, m)
	}
	return seen, nil
}

type mountEntry struct {
	readOnly    bool
	propagation driverpb.MountPropagation
}

// procMounts parses /proc/PID/mountinfo: mount point → what it is.
func procMounts(pid string) (map[string]mountEntry, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]mountEntry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		e := mountEntry{
			readOnly:    slices.Contains(strings.Split(fields[5], ","), "ro"),
			propagation: driverpb.MountPropagation_MOUNT_PROPAGATION_PRIVATE,
		}
		var shared, slave bool
		for _, opt := range fields[6:] {
			if opt == "-" {
				break
			}
			shared = shared || strings.HasPrefix(opt, "shared:")
			slave = slave || strings.HasPrefix(opt, "master:")
		}
		switch {
		case shared:
			e.propagation = driverpb.MountPropagation_MOUNT_PROPAGATION_BIDIRECTIONAL
		case slave:
			e.propagation = driverpb.MountPropagation_MOUNT_PROPAGATION_HOST_TO_TASK
		}
		out[fields[4]] = e
	}
	return out, sc.Err()
}
