package ctrdriver_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
	"berth.dev/berth/sdk/drivertest"

	"berth.dev/examples/containerd/ctrdriver"
)

// Over the protocol, a start asking for host access the plugin config
// does not allow is a config error naming the key and the opt-in, before
// containerd is asked anything (none runs here).
func TestStartRefusesPrivilegedUnlessAllowed(t *testing.T) {
	d := drivertest.InProcess(t, ctrdriver.New(drivertest.Logger(t)))
	ctx, cancel := testCtx()
	defer cancel()
	sock := filepath.Join(t.TempDir(), "no-containerd.sock")
	if err := d.SetConfig(ctx, &driverpb.PluginConfig{Values: sdk.ConfigMap{"address": sdk.StringValue(sock)}}); err != nil {
		t.Fatal(err)
	}
	_, err := d.StartTask(ctx, &driverpb.TaskConfig{Id: "t1", Name: "t", DriverConfig: sdk.ConfigMap{
		"image": sdk.StringValue("alpine"), "privileged": sdk.BoolValue(true), "mounts": sdk.ListValue("/:/host")}})
	var ce *sdk.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "allow_privileged = true") || !strings.Contains(err.Error(), "allow_host_mounts = true") {
		t.Fatalf("StartTask of a privileged task with a host mount on a default config: %v, want config errors naming allow_privileged and allow_host_mounts", err)
	}
}
