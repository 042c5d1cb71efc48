package ctrdriver

import (
	"errors"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
	"berth.dev/berth/sdk/driverpb"
)

// By default a task cannot reach past its container: privileged, host
// bind mounts, host devices and capabilities beyond Docker's default set
// are refused, each naming the task key and the plugin config key that
// would allow it; the plugin config opts in.
func TestHostAccessNeedsThePluginConfigsOptIn(t *testing.T) {
	def, err := parsePluginConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, allow string
		dc         sdk.ConfigMap
	}{
		{"privileged", "allow_privileged = true", sdk.ConfigMap{"privileged": sdk.BoolValue(true)}},
		{"mounts", "allow_host_mounts = true", sdk.ConfigMap{"mounts": sdk.ListValue("/:/host")}},
		{"devices", "allow_devices = true", sdk.ConfigMap{"devices": sdk.ListValue("/dev/sda")}},
		{"cap_add", `"sys_admin"`, sdk.ConfigMap{"cap_add": sdk.ListValue("SYS_ADMIN")}},
		{"cap_add", `allow_caps = ["all"]`, sdk.ConfigMap{"cap_add": sdk.ListValue("all")}},
	} {
		c.dc["image"] = sdk.StringValue("alpine")
		tc, err := parseTaskConfig(c.dc)
		if err != nil {
			t.Fatal(err)
		}
		err = def.gates.check(tc)
		var ce *sdk.ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || ce.Scope != sdk.ScopeTaskConfig || !strings.Contains(ce.Problem, c.allow) {
			t.Errorf("%v under the default plugin config: %v; want a config error on %s naming %s", c.dc, err, c.key, c.allow)
		}
		if !errors.Is(err, sdk.ErrInvalidConfig) {
			t.Errorf("%v: %v is not an invalid-config error", c.dc, err)
		}
	}
	// Docker's default capabilities may be added (back) without an opt-in.
	tc, err := parseTaskConfig(sdk.ConfigMap{"image": sdk.StringValue("alpine"), "cap_drop": sdk.ListValue("all"),
		"cap_add": sdk.ListValue("net_bind_service", "CHOWN")})
	if err != nil {
		t.Fatal(err)
	}
	if err := def.gates.check(tc); err != nil {
		t.Errorf("cap_add of default capabilities: %v", err)
	}
	open, err := parsePluginConfigValues(sdk.ConfigMap{"allow_privileged": sdk.BoolValue(true), "allow_host_mounts": sdk.BoolValue(true),
		"allow_devices": sdk.BoolValue(true), "allow_caps": sdk.ListValue("net_admin", "sys_admin")})
	if err != nil {
		t.Fatal(err)
	}
	tc, err = parseTaskConfig(sdk.ConfigMap{"image": sdk.StringValue("alpine"), "privileged": sdk.BoolValue(true),
		"mounts": sdk.ListValue("/srv:/srv"), "devices": sdk.ListValue("/dev/fuse"), "cap_add": sdk.ListValue("SYS_ADMIN")})
	if err != nil {
		t.Fatal(err)
	}
	if err := open.gates.check(tc); err != nil {
		t.Errorf("a config the plugin config allows: %v", err)
	}
	tc.capAdd = []string{"CAP_CHOWN"}
	if err := open.gates.check(tc); err == nil || !strings.Contains(err.Error(), "CHOWN") {
		t.Errorf("allow_caps replaces the default set: cap_add chown gave %v, want it refused", err)
	}
	if _, err := parsePluginConfigValues(sdk.ConfigMap{"allow_caps": sdk.ListValue("no_such_cap")}); err == nil || !strings.Contains(err.Error(), "allow_caps") {
		t.Errorf("allow_caps with an unknown capability: %v, want an error naming allow_caps", err)
	}
}

// A config mount at the container path of one of berth's own mounts (a
// task directory, a volume_mount, the CSI plugin directory) would shadow
// it: refused, naming the entry.
func TestConfigMountCannotShadowBerthsMounts(t *testing.T) {
	d := New(nil)
	dir := t.TempDir()
	for _, target := range []string{"/alloc", "/vol"} {
		tc, err := parseTaskConfig(sdk.ConfigMap{"image": sdk.StringValue("alpine"), "mounts": sdk.ListValue(dir+":/elsewhere", dir+":"+target)})
		if err != nil {
			t.Fatal(err)
		}
		cfg := &driverpb.TaskConfig{Id: "t", Env: map[string]string{"BERTH_ALLOC_DIR": dir},
			Mounts: []*driverpb.Mount{{HostPath: dir, TaskPath: "/vol"}}}
		_, _, _, err = d.taskMounts(cfg, tc)
		var ce *sdk.ConfigError
		if !errors.As(err, &ce) || ce.Key != "mounts" || !strings.Contains(ce.Problem, "mounts[1]") || !strings.Contains(ce.Problem, target) {
			t.Errorf("config mount at %s: %v, want a config error on mounts[1] naming %s", target, err, target)
		}
	}
}
