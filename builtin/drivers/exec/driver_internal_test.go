package execdriver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// TestNotRootSaysSo: a plugin not running as root is unhealthy with
// "exec requires root", and StartTask refuses with a coded error.
func TestNotRootSaysSo(t *testing.T) {
	d := New(nil)
	d.euid = 1000
	if fp := d.fingerprint(); fp.GetHealth() != driverpb.Health_HEALTH_UNDETECTED || !strings.Contains(fp.GetHealthDescription(), "disabled") {
		t.Errorf("disabled fingerprint = %v, want undetected, saying it is disabled", fp)
	}
	if err := d.SetConfig(context.Background(), &driverpb.PluginConfig{Values: sdk.ConfigMap{"enabled": sdk.BoolValue(true)}}); err != nil {
		t.Fatal(err)
	}
	fp := d.fingerprint()
	if fp.GetHealth() != driverpb.Health_HEALTH_UNHEALTHY || !strings.Contains(fp.GetHealthDescription(), "exec requires root") {
		t.Errorf("fingerprint as uid 1000 = %v, want unhealthy saying exec requires root", fp)
	}
	_, err := d.StartTask(context.Background(), &driverpb.TaskConfig{Id: "t1", TaskDir: t.TempDir()})
	if !errors.Is(err, sdk.ErrDriverUnhealthy) || !strings.Contains(err.Error(), "exec requires root") {
		t.Fatalf("StartTask as uid 1000 = %v, want ErrDriverUnhealthy saying exec requires root", err)
	}
	var coded interface{ GRPCCode() codes.Code }
	if !errors.As(err, &coded) || coded.GRPCCode() == codes.Unknown || coded.GRPCCode() == codes.Internal {
		t.Errorf("StartTask refusal %v has no proper gRPC code", err)
	}
}

// TestPluginConfigChrootEnv: chroot_env replaces the default set, and
// paths that are not clean absolute ones are refused naming the key.
func TestPluginConfigChrootEnv(t *testing.T) {
	pc, err := parsePluginConfig(&driverpb.PluginConfig{Values: sdk.ConfigMap{
		"chroot_env": sdk.MapValue(map[string]string{"/usr": "/usr", "/opt/tools": "/tools"}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pc.chrootEnv) != 2 || pc.chrootEnv[0] != [2]string{"/opt/tools", "/tools"} || pc.chrootEnv[1] != [2]string{"/usr", "/usr"} {
		t.Errorf("chroot env = %v", pc.chrootEnv)
	}
	for _, bad := range []map[string]string{{"usr": "/usr"}, {"/usr": "/"}, {"/usr/../etc": "/etc"}, {"/usr": "/u\x00sr"}} {
		_, err := parsePluginConfig(&driverpb.PluginConfig{Values: sdk.ConfigMap{"chroot_env": sdk.MapValue(bad)}})
		var ce *sdk.ConfigError
		if !errors.As(err, &ce) || ce.Key != "chroot_env" {
			t.Errorf("chroot_env %q: %v, want a ConfigError for chroot_env", bad, err)
		}
	}
}
