package ctrdriver

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"berth.dev/berth/sdk"
)

func TestParseTaskConfigErrorsNameTheirKey(t *testing.T) {
	img := sdk.StringValue("alpine")
	for _, c := range []struct {
		cfg     sdk.ConfigMap
		key     string
		problem string
	}{
		{sdk.ConfigMap{}, "image", "required"},
		{sdk.ConfigMap{"image": sdk.StringValue(" ")}, "image", "must name an image"},
		{sdk.ConfigMap{"image": img, "load": sdk.StringValue("a.tar")}, "load", "not an absolute path"},
		{sdk.ConfigMap{"image": img, "command": sdk.StringValue("")}, "command", "must not be empty"},
		{sdk.ConfigMap{"image": img, "working_dir": sdk.StringValue("tmp")}, "working_dir", "not an absolute path"},
		{sdk.ConfigMap{"image": img, "env": sdk.MapValue(map[string]string{"A=B": "c"})}, "env", "not a valid variable name"},
		{sdk.ConfigMap{"image": img, "cap_add": sdk.ListValue("SYS_NOPE")}, "cap_add", `unknown capability "SYS_NOPE"`},
		{sdk.ConfigMap{"image": img, "cap_drop": sdk.ListValue("")}, "cap_drop", "unknown capability"},
		{sdk.ConfigMap{"image": img, "devices": sdk.ListValue("dev/fuse")}, "devices", "devices[0]"},
		{sdk.ConfigMap{"image": img, "devices": sdk.ListValue("/dev/fuse:/dev/fuse:x")}, "devices", "permissions"},
		{sdk.ConfigMap{"image": img, "devices": sdk.ListValue("/a:/b:r:w")}, "devices", "want host_path"},
		{sdk.ConfigMap{"image": img, "mounts": sdk.ListValue("/a")}, "mounts", "want host_path:container_path"},
		{sdk.ConfigMap{"image": img, "mounts": sdk.ListValue("/a:/")}, "mounts", "must not be /"},
		{sdk.ConfigMap{"image": img, "mounts": sdk.ListValue("/a:/b/../c")}, "mounts", "'..'"},
		{sdk.ConfigMap{"image": img, "mounts": sdk.ListValue("/a:/b:rw,shared,nope")}, "mounts", `unknown option "nope"`},
		{sdk.ConfigMap{"image": img, "mounts": sdk.ListValue("/a:/b", "/c:/b/")}, "mounts", "mounts[1]"},
		{sdk.ConfigMap{"image": img, "host_network": sdk.StringValue("true")}, "host_network", "expected a bool"},
	} {
		_, err := parseTaskConfig(c.cfg)
		var ce *sdk.ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || ce.Scope != sdk.ScopeTaskConfig || !strings.Contains(ce.Problem, c.problem) {
			t.Errorf("parseTaskConfig(%v) = %v; want a task-config error on %q saying %q", c.cfg, err, c.key, c.problem)
		}
	}
}

func TestParseTaskConfig(t *testing.T) {
	tc, err := parseTaskConfig(sdk.ConfigMap{
		"image":   sdk.StringValue("alpine"),
		"cap_add": sdk.ListValue("net_admin", "CAP_SYS_ADMIN", "all"),
		"devices": sdk.ListValue("/dev/fuse", "/dev/null:/dev/zero2:r"),
		"mounts":  sdk.ListValue("/srv:/data:ro,rshared", "/x:/y/:rslave,rw", "/p:/q"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "ALL"}; !slices.Equal(tc.capAdd, want) {
		t.Errorf("cap_add %v, want %v", tc.capAdd, want)
	}
	if want := []device{{"/dev/fuse", "/dev/fuse", "rwm"}, {"/dev/null", "/dev/zero2", "r"}}; !slices.Equal(tc.devices, want) {
		t.Errorf("devices %v, want %v", tc.devices, want)
	}
	want := []bindMount{{0, "/srv", "/data", true, "rshared"}, {1, "/x", "/y", false, "rslave"}, {2, "/p", "/q", false, "rprivate"}}
	if !slices.Equal(tc.mounts, want) {
		t.Errorf("mounts %v, want %v", tc.mounts, want)
	}
}

func TestProcessArgsFollowDocker(t *testing.T) {
	entry, cmd := []string{"/ep", "-x"}, []string{"serve", "--port=1"}
	for _, c := range []struct {
		name string
		tc   taskConfig
		want []string
	}{
		{"the image's", taskConfig{}, []string{"/ep", "-x", "serve", "--port=1"}},
		{"entrypoint drops CMD", taskConfig{hasEntry: true, entrypoint: []string{"/other"}}, []string{"/other"}},
		{"command replaces CMD", taskConfig{hasCommand: true, command: "run", hasArgs: true, args: []string{"a"}}, []string{"/ep", "-x", "run", "a"}},
		{"args replace CMD", taskConfig{hasArgs: true, args: []string{"a", "b"}}, []string{"/ep", "-x", "a", "b"}},
		{"entrypoint and command", taskConfig{hasEntry: true, entrypoint: []string{"/sh", "-c"}, hasCommand: true, command: "echo hi"}, []string{"/sh", "-c", "echo hi"}},
	} {
		if got := processArgs(entry, cmd, &c.tc); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if !slices.Equal(entry, []string{"/ep", "-x"}) {
		t.Errorf("processArgs changed the image's entrypoint: %q", entry)
	}
}

func TestContainerEnv(t *testing.T) {
	mounts := []bindMount{{source: "/data/alloc/a1/web/local", target: "/local"}}
	got := containerEnv(map[string]string{
		"PATH": "/host/bin", "BERTH_TASK_DIR": "/data/alloc/a1/web/local", "BERTH_SECRETS_DIR": "/not/mounted", "X": "task",
	}, map[string]string{"X": "config"}, true, mounts)
	want := []string{"BERTH_SECRETS_DIR=/not/mounted", "BERTH_TASK_DIR=/local", "X=config"}
	if !slices.Equal(got, want) {
		t.Errorf("containerEnv = %q, want %q", got, want)
	}
	if got := containerEnv(map[string]string{"PATH": "/host/bin"}, nil, false, nil); !slices.Equal(got, []string{"PATH=/host/bin"}) {
		t.Errorf("containerEnv for an image without PATH = %q, want the task's PATH", got)
	}
}

func TestContainerID(t *testing.T) {
	if got := containerID("a1b2-web-0"); got != "a1b2-web-0" {
		t.Errorf("containerID of a valid ID = %q", got)
	}
	for _, id := range []string{"-lead", "a..b", "x_" + strings.Repeat("y", 100), "trail."} {
		got := containerID(id)
		if !containerIDRE.MatchString(got) || len(got) > 76 || got == id {
			t.Errorf("containerID(%q) = %q, not a containerd identifier", id, got)
		}
		if containerID(id) != got {
			t.Errorf("containerID(%q) is not stable", id)
		}
	}
}

func TestParsePluginConfig(t *testing.T) {
	pc, err := parsePluginConfig(nil)
	if err != nil || pc.address != DefaultAddress || pc.namespace != DefaultNamespace || pc.snapshotter != "overlayfs" {
		t.Errorf("defaults: %+v, %v", pc, err)
	}
	for key, v := range map[string]sdk.ConfigMap{
		"namespace":   {"namespace": sdk.StringValue("-bad")},
		"address":     {"address": sdk.StringValue("")},
		"snapshotter": {"snapshotter": sdk.StringValue("")},
	} {
		_, err := parsePluginConfigValues(v)
		var ce *sdk.ConfigError
		if !errors.As(err, &ce) || ce.Key != key || ce.Scope != sdk.ScopePlugin {
			t.Errorf("plugin config %v: %v, want an error on %q", v, err, key)
		}
	}
}

// FuzzParseTaskConfig: any list entries are parsed or refused with a
// config error, never a panic, and what is accepted is well formed.
func FuzzParseTaskConfig(f *testing.F) {
	f.Add("alpine", "/a:/b:ro,rshared", "/dev/fuse:/dev/fuse:rwm", "NET_ADMIN", "/x")
	f.Add("", ":", "::", "all", "")
	f.Add("UPPER", "/a:/b:c:d", "/dev/x:y", "cap_", "/w/../x")
	f.Fuzz(func(t *testing.T, image, mount, dev, capName, wd string) {
		tc, err := parseTaskConfig(sdk.ConfigMap{
			"image": sdk.StringValue(image), "mounts": sdk.ListValue(mount), "devices": sdk.ListValue(dev),
			"cap_add": sdk.ListValue(capName), "cap_drop": sdk.ListValue(capName), "working_dir": sdk.StringValue(wd),
		})
		if err != nil {
			if !errors.Is(err, sdk.ErrInvalidConfig) {
				t.Fatalf("error %v is not a config error", err)
			}
			return
		}
		for _, m := range tc.mounts {
			if !cleanAbs(m.source) || !cleanAbs(m.target) || m.target == "/" || !slices.Contains([]string{"rprivate", "rslave", "rshared"}, m.propagation) {
				t.Fatalf("accepted mount %+v", m)
			}
		}
		for _, d := range tc.devices {
			if !cleanAbs(d.host) || !cleanAbs(d.container) || d.permissions == "" {
				t.Fatalf("accepted device %+v", d)
			}
		}
	})
}
