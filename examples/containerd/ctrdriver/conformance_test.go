package ctrdriver_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
)

// testNamespace is the containerd namespace the tests use.
const testNamespace = "berth-test"

func TestMain(m *testing.M) {
	drivertest.ServeIfPlugin(func(l hclog.Logger) sdk.Driver { return ctrdriver.New(l) })
	code := m.Run()
	cleanAfterTests()
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
		MountsSeen: drivertest.MountsFromProc,
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
