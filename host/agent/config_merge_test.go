package agent

import (
	"reflect"
	"testing"
	"time"
)

func mustParse(t *testing.T, name, src string) *Config {
	t.Helper()
	c, err := ParseConfig(name, []byte(src))
	if err != nil {
		t.Fatalf("ParseConfig(%s): %v", name, err)
	}
	return c
}

// A file can set a value back to false or zero: presence, not value, decides.
func TestMergeFileSetsZeroValues(t *testing.T) {
	first := mustParse(t, "a.hcl", "server {\n  enabled = true\n  leave_on_terminate = true\n  raft_trailing_logs = 5\n}\nlog_json = true\n")
	second := mustParse(t, "b.hcl", "server {\n  leave_on_terminate = false\n  raft_trailing_logs = 0\n}\nlog_json = false\n")
	c := DefaultConfig().Merge(first).Merge(second)
	if !c.Server.Enabled {
		t.Errorf("server.enabled = false, want true kept from a.hcl")
	}
	if c.Server.LeaveOnTerminate || c.Server.RaftTrailingLogs != 0 || c.LogJSON {
		t.Errorf("leave_on_terminate=%v raft_trailing_logs=%d log_json=%v, want b.hcl's false, 0, false",
			c.Server.LeaveOnTerminate, c.Server.RaftTrailingLogs, c.LogJSON)
	}
	if got, want := c.set["server.leave_on_terminate"], (SourcePos{File: "b.hcl", Line: 2, Column: 24}); got != want {
		t.Errorf("leave_on_terminate set at %v, want %v", got, want)
	}
	if got, want := c.set["server.enabled"], (SourcePos{File: "a.hcl", Line: 2, Column: 13}); got != want {
		t.Errorf("server.enabled set at %v, want %v", got, want)
	}
}

// A Config built in Go (flags, DevConfig) sets its non-zero fields.
func TestMergeGoBuiltSetsNonZeroFields(t *testing.T) {
	base := mustParse(t, "a.hcl", "data_dir = \"/a\"\nlog_level = \"warn\"\nserver {\n  enabled = true\n}\n")
	flags := &Config{DataDir: "/from/flag", Server: ServerConfig{RetryInterval: time.Minute}}
	c := base.Merge(flags)
	if c.DataDir != "/from/flag" || c.Server.RetryInterval != time.Minute {
		t.Errorf("data_dir=%q retry_interval=%s, want the flag values", c.DataDir, c.Server.RetryInterval)
	}
	if c.LogLevel != "warn" || !c.Server.Enabled {
		t.Errorf("log_level=%q server.enabled=%v, want a.hcl's values kept (zero flags set nothing)", c.LogLevel, c.Server.Enabled)
	}
	if pos, ok := c.set["data_dir"]; !ok || pos.IsValid() {
		t.Errorf("data_dir: set=%v pos=%v, want set with no file position", ok, pos)
	}
}

func TestMergeLeavesInputsAlone(t *testing.T) {
	a := mustParse(t, "a.hcl", baseHCL)
	b := mustParse(t, "b.json", overrideJSON)
	aBefore, bBefore := a.Copy(), b.Copy()

	c := a.Merge(b)
	c.Server.RetryJoin[0] = "changed:1"
	c.Client.Servers[0] = "changed:1"
	c.Plugins["raw_exec"].Config["volumes"].(map[string]any)["selinux"] = "changed"
	c.Plugins["mock"].Config["new"] = true
	c.set["name"] = SourcePos{}

	if !reflect.DeepEqual(a, aBefore) {
		t.Errorf("Merge result shares memory with its receiver")
	}
	if !reflect.DeepEqual(b, bBefore) {
		t.Errorf("Merge result shares memory with its argument")
	}
}

func TestMergePluginSourceAndNames(t *testing.T) {
	a := mustParse(t, "a.hcl", "plugin \"x\" {\n  config {\n    a = 1\n  }\n}\n")
	b := &Config{Plugins: map[string]*PluginConfig{"x": {Name: "x", Config: map[string]any{"b": int64(2)}}}}
	c := a.Merge(b)
	want := &PluginConfig{Name: "x", Config: map[string]any{"a": int64(1), "b": int64(2)}, Source: "a.hcl:1"}
	if got := c.Plugins["x"]; !reflect.DeepEqual(got, want) {
		t.Errorf("plugin x = %#v, want %#v (a Go-built plugin keeps the file's Source)", got, want)
	}
}

func TestMergeMaps(t *testing.T) {
	base := map[string]any{"a": int64(1), "l": []any{int64(1), int64(2)}, "m": map[string]any{"x": "1", "y": "2"}, "s": "str"}
	over := map[string]any{"l": []any{int64(3)}, "m": map[string]any{"y": "3", "z": "4"}, "s": map[string]any{"now": "a map"}}
	want := map[string]any{
		"a": int64(1),
		"l": []any{int64(3)},
		"m": map[string]any{"x": "1", "y": "3", "z": "4"},
		"s": map[string]any{"now": "a map"},
	}
	if got := mergeMaps(base, over); !reflect.DeepEqual(got, want) {
		t.Errorf("mergeMaps = %#v, want %#v", got, want)
	}
}
