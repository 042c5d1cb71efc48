package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// fullConfig is what testdata/config/full.hcl and full.json describe.
func fullConfig() *Config {
	return &Config{
		Name:     "s1",
		DataDir:  "/var/lib/berth",
		BindAddr: "127.0.0.1",
		Ports:    Ports{HTTP: 7646, RPC: 7647, Raft: 7648},
		Server: ServerConfig{
			Enabled:                 true,
			BootstrapExpect:         3,
			RetryJoin:               []string{"127.0.0.1:7647"},
			RetryInterval:           5 * time.Second,
			HeartbeatTTL:            10 * time.Second,
			HeartbeatGrace:          10 * time.Second,
			LeaveOnTerminate:        false,
			RaftSnapshotThreshold:   8192,
			RaftSnapshotInterval:    120 * time.Second,
			RaftTrailingLogs:        10240,
			ForceDetachAfter:        10 * time.Minute,
			VolumeReconcileInterval: time.Minute,
			GCPercent:               400,
		},
		Client: ClientConfig{
			Enabled: true,
			Servers: []string{"127.0.0.1:7647"},
		},
		PluginDir: "/opt/berth/plugins",
		Plugins: map[string]*PluginConfig{
			"raw_exec": {
				Name: "raw_exec",
				Config: map[string]any{
					"enabled":  true,
					"anything": []any{"the driver's schema validates this later"},
				},
			},
		},
		LogLevel: "info",
	}
}

// public returns a copy of c without what only Merge and Validate look at
// (which keys files set, where plugin blocks were), for comparing values.
func public(c *Config) *Config {
	n := c.Copy()
	n.set = nil
	for _, p := range n.Plugins {
		p.Source = ""
	}
	return n
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "config", name))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestParseConfigFull(t *testing.T) {
	for _, tc := range []struct {
		file       string
		wantSource string
	}{
		{"full.hcl", "full.hcl:26"},
		{"full.json", "full.json:29"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, err := ParseConfig(tc.file, readTestdata(t, tc.file))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			if got, want := public(c), fullConfig(); !reflect.DeepEqual(got, want) {
				t.Errorf("config mismatch\n got: %#v\nwant: %#v", got, want)
			}
			if got := c.Plugins["raw_exec"].Source; got != tc.wantSource {
				t.Errorf("raw_exec Source = %q, want %q", got, tc.wantSource)
			}
			if err := DefaultConfig().Merge(c).Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// A plugin's config reads the same in HCL and in JSON, and its values are
// plain Go values a plugin schema (or encoding/json) can take.
func TestParseConfigPluginBody(t *testing.T) {
	hclSrc := `
plugin "docker" {
  config {
    enabled    = true
    count      = 3
    ratio      = 0.5
    big        = 1e20
    nothing    = null
    labels     = { team = "storage", tier = 1 }
    args       = ["a", 2, false, ["nested"]]
    sum        = 1 + 2
    greeting   = "hello ${"world"}"
    volumes {
      enabled = true
    }
    mount {
      source = "/a"
    }
    mount {
      source = "/b"
    }
    auth "registry.example" {
      user = "me"
    }
    auth "other.example" {
      user = "you"
    }
  }
}
`
	jsonSrc := `{"plugin": {"docker": {"config": {
  "enabled": true, "count": 3, "ratio": 0.5, "big": 1e20, "nothing": null,
  "labels": {"team": "storage", "tier": 1},
  "args": ["a", 2, false, ["nested"]],
  "sum": 3, "greeting": "hello world",
  "volumes": {"enabled": true},
  "mount": [{"source": "/a"}, {"source": "/b"}],
  "auth": {"registry.example": {"user": "me"}, "other.example": {"user": "you"}}
}}}}`
	want := map[string]any{
		"enabled":  true,
		"count":    int64(3),
		"ratio":    0.5,
		"big":      float64(1e20),
		"nothing":  nil,
		"labels":   map[string]any{"team": "storage", "tier": int64(1)},
		"args":     []any{"a", int64(2), false, []any{"nested"}},
		"sum":      int64(3),
		"greeting": "hello world",
		"volumes":  map[string]any{"enabled": true},
		"mount":    []any{map[string]any{"source": "/a"}, map[string]any{"source": "/b"}},
		"auth": map[string]any{
			"registry.example": map[string]any{"user": "me"},
			"other.example":    map[string]any{"user": "you"},
		},
	}
	for file, src := range map[string]string{"a.hcl": hclSrc, "a.json": jsonSrc} {
		c, err := ParseConfig(file, []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		p := c.Plugins["docker"]
		if p == nil || p.Name != "docker" {
			t.Fatalf("%s: plugin docker = %+v", file, p)
		}
		if !reflect.DeepEqual(p.Config, want) {
			t.Errorf("%s: config\n got: %#v\nwant: %#v", file, p.Config, want)
		}
		if _, err := json.Marshal(p.Config); err != nil {
			t.Errorf("%s: config does not encode as JSON: %v", file, err)
		}
	}
}

func TestParseConfigOnlyHoldsWhatTheFileSets(t *testing.T) {
	c, err := ParseConfig("a.hcl", []byte("server {\n  enabled = false\n}\nlog_level = null\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{Plugins: map[string]*PluginConfig{}}
	if got := public(c); !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want only zero values", got)
	}
	wantSet := map[string]SourcePos{"server.enabled": {File: "a.hcl", Line: 2, Column: 13}}
	if !reflect.DeepEqual(c.set, wantSet) {
		t.Errorf("set = %v, want %v (null leaves log_level unset)", c.set, wantSet)
	}
}

func TestParseConfigPluginWithoutConfig(t *testing.T) {
	c, err := ParseConfig("a.hcl", []byte("plugin \"mock\" {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &PluginConfig{Name: "mock", Config: map[string]any{}, Source: "a.hcl:1"}
	if got := c.Plugins["mock"]; !reflect.DeepEqual(got, want) {
		t.Errorf("plugin = %#v, want %#v", got, want)
	}
}

func BenchmarkParseConfig(b *testing.B) {
	for _, file := range []string{"full.hcl", "full.json"} {
		src, err := os.ReadFile(filepath.Join("testdata", "config", file))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(file, func(b *testing.B) {
			for b.Loop() {
				if _, err := ParseConfig(file, src); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// HCL 1's compact style is split before parsing (internal/hclsrc); errors
// still point into the file as written.
func TestCompactPositionsMapBack(t *testing.T) {
	src := "ports { http = 7646  rpc = 7647 }\nserver { enabled = true  bootstrap_expect = \"3\" }\n\nlog_level = \"info\"  log_jsn = true\n"
	_, err := ParseConfig("a.hcl", []byte(src))
	want := "a.hcl:2:45: server.bootstrap_expect: whole number required, got string\n" +
		"a.hcl:4:21: unknown key \"log_jsn\" (did you mean \"log_json\"?)"
	if err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}
}
