package agent

import (
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
			Enabled:               true,
			BootstrapExpect:       3,
			RetryJoin:             []string{"127.0.0.1:7647"},
			RetryInterval:         5 * time.Second,
			HeartbeatTTL:          10 * time.Second,
			HeartbeatGrace:        10 * time.Second,
			LeaveOnTerminate:      false,
			RaftSnapshotThreshold: 8192,
			RaftSnapshotInterval:  120 * time.Second,
			RaftTrailingLogs:      10240,
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
		{"full.hcl", "full.hcl:23"},
		{"full.json", "full.json:26"},
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
