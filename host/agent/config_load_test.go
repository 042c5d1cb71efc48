package agent

import (
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

const baseHCL = `
data_dir  = "/var/lib/berth"
log_level = "debug"
server {
  enabled          = true
  bootstrap_expect = 3
  retry_join       = ["10.0.0.1", "10.0.0.2:8000"]
}
client {
  enabled = true
  servers = ["10.0.0.1"]
}
plugin "raw_exec" {
  config {
    enabled = true
    args    = [1, 2]
    volumes {
      enabled = true
      selinux = "z"
    }
  }
}
`

const overrideJSON = `{
  "log_json": true,
  "server": {
    "bootstrap_expect": 5,
    "retry_join": ["10.0.0.9"],
    "heartbeat_ttl": "30s"
  },
  "client": {"enabled": false},
  "plugin": {
    "raw_exec": {"config": {"args": [3], "volumes": {"selinux": "Z"}}},
    "mock": {}
  }
}`

// mergedBaseOverride is DefaultConfig with baseHCL, then overrideJSON.
func mergedBaseOverride() *Config {
	want := DefaultConfig()
	want.DataDir = "/var/lib/berth"
	want.LogLevel = "debug" // only the earlier file sets it
	want.LogJSON = true
	want.Server.Enabled = true
	want.Server.BootstrapExpect = 5
	want.Server.RetryJoin = []string{"10.0.0.9:7647"} // lists replace
	want.Server.HeartbeatTTL = 30 * time.Second
	want.Client.Enabled = false // a later false overrides an earlier true
	want.Client.Servers = []string{"10.0.0.1:7647"}
	want.Plugins = map[string]*PluginConfig{
		"raw_exec": {Name: "raw_exec", Config: map[string]any{
			"enabled": true,
			"args":    []any{int64(3)},
			"volumes": map[string]any{"enabled": true, "selinux": "Z"},
		}},
		"mock": {Name: "mock", Config: map[string]any{}},
	}
	return want
}

func TestLoadConfigFilesMergesInOrder(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"base.hcl": baseHCL, "override.json": overrideJSON})
	base, override := filepath.Join(dir, "base.hcl"), filepath.Join(dir, "override.json")

	c, err := LoadConfigFiles([]string{base, override})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := public(c), mergedBaseOverride(); !reflect.DeepEqual(got, want) {
		t.Errorf("merged config\n got: %#v\nwant: %#v", got, want)
	}
	if got, want := c.Plugins["raw_exec"].Source, override+":10"; got != want {
		t.Errorf("raw_exec Source = %q, want the later file's %q", got, want)
	}

	// The other order: base wins wherever both set a value.
	c, err = LoadConfigFiles([]string{override, base})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.BootstrapExpect != 3 || !c.Client.Enabled || !reflect.DeepEqual(c.Server.RetryJoin, []string{"10.0.0.1:7647", "10.0.0.2:8000"}) {
		t.Errorf("reversed order: bootstrap_expect=%d client.enabled=%v retry_join=%v, want base's 3, true, its list",
			c.Server.BootstrapExpect, c.Client.Enabled, c.Server.RetryJoin)
	}
	if c.Server.HeartbeatTTL != 30*time.Second || !c.LogJSON {
		t.Errorf("reversed order lost values only the override sets")
	}
	if got := c.Plugins["raw_exec"].Config["volumes"]; !reflect.DeepEqual(got, map[string]any{"enabled": true, "selinux": "z"}) {
		t.Errorf("reversed order: raw_exec volumes = %v", got)
	}
}

func TestLoadConfigFilesDirectory(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{
		"10-base.hcl":        baseHCL,
		"20-override.json":   overrideJSON,
		"README.md":          "not a config",
		".10-base.hcl.swp":   "garbage {",
		".#lock.hcl":         "garbage {",
		"nested.hcl/foo.hcl": "garbage {",
	})
	c, err := LoadConfigFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := public(c), mergedBaseOverride(); !reflect.DeepEqual(got, want) {
		t.Errorf("directory config\n got: %#v\nwant: %#v", got, want)
	}

	// A file after the directory overrides it.
	testutil.WriteFiles(t, dir, map[string]string{"../late.hcl": "server {\n  bootstrap_expect = 7\n}\n"})
	c, err = LoadConfigFiles([]string{dir, filepath.Join(dir, "..", "late.hcl")})
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.BootstrapExpect != 7 {
		t.Errorf("bootstrap_expect = %d, want 7 from the file after the directory", c.Server.BootstrapExpect)
	}
}

func TestLoadConfigFilesReportsEveryFile(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{
		"a.hcl":  "server {\n  enabled = \"yes\"\n}\n",
		"b.json": `{"ports": {"http": 0}}`,
		"c.hcl":  "name = \"fine\"\n",
	})
	_, err := LoadConfigFiles([]string{dir})
	want := filepath.Join(dir, "a.hcl") + ":2:13: server.enabled: bool required, got string\n" +
		filepath.Join(dir, "b.json") + ":1:20: ports.http: 0 is out of range 1-65535"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
}

func TestLoadConfigFilesMissing(t *testing.T) {
	_, err := LoadConfigFiles([]string{filepath.Join(t.TempDir(), "nope.hcl")})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v, want fs.ErrNotExist", err)
	}
}

func TestLoadConfigFilesNoPaths(t *testing.T) {
	c, err := LoadConfigFiles(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(public(c), public(DefaultConfig())) {
		t.Errorf("LoadConfigFiles(nil) = %#v, want the defaults", c)
	}
}

// `berth run -dev -config extra.hcl`: the files' defaults must not undo
// what dev mode chose; only keys the files contain apply.
func TestDevConfigMergedWithFiles(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"extra.hcl": "log_level = \"debug\"\nserver {\n  heartbeat_ttl = \"2s\"\n}\n"})
	files, err := LoadConfigFiles([]string{filepath.Join(dir, "extra.hcl")})
	if err != nil {
		t.Fatal(err)
	}
	c := DevConfig().Merge(files)
	want := DevConfig()
	want.LogLevel = "debug"
	want.Server.HeartbeatTTL = 2 * time.Second
	if !reflect.DeepEqual(public(c), public(want)) {
		t.Errorf("dev + file\n got: %#v\nwant: %#v", public(c), public(want))
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}
