package agent

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"berth.dev/berth/internal/testutil"
)

func validBase() *Config { return DefaultConfig().Merge(fullConfig()) }

func TestValidateAcceptsGoodConfigs(t *testing.T) {
	for name, c := range map[string]*Config{
		"full":        validBase(),
		"dev":         DevConfig(),
		"client only": DefaultConfig().Merge(&Config{DataDir: "/d", Client: ClientConfig{Enabled: true, Servers: []string{"s1"}}}),
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"port out of range", func(c *Config) { c.Ports.HTTP = 0 }, "ports.http: 0 is out of range 1-65535"},
		{"port too large", func(c *Config) { c.Ports.Raft = 65536 }, "ports.raft: 65536 is out of range 1-65535"},
		{"ports collide", func(c *Config) { c.Ports.Raft = c.Ports.HTTP }, "ports.raft: 7646 is already the http port"},
		{"bind_addr not an IP", func(c *Config) { c.BindAddr = "localhost" }, `bind_addr: "localhost" is not an IP address`},
		{"bind_addr unspecified on a server", func(c *Config) { c.BindAddr = "0.0.0.0" },
			"bind_addr: 0.0.0.0 cannot be advertised to raft peers; a server needs the address other servers reach it at"},
		{"no role", func(c *Config) { c.Server.Enabled, c.Client.Enabled = false, false },
			"at least one of server.enabled and client.enabled must be true"},
		{"bootstrap_expect missing", func(c *Config) { c.Server.BootstrapExpect = 0 },
			"server.bootstrap_expect: must be at least 1 when the server is enabled: the number of servers to wait for before electing a leader"},
		{"bootstrap_expect in dev mode", func(c *Config) { c.DevMode = true },
			"server.bootstrap_expect: dev mode runs a single server, so it must be 1, got 3"},
		{"retry_join entry", func(c *Config) { c.Server.RetryJoin = []string{"a:1", "a b"} },
			`server.retry_join[1]: "a b" is not host or host:port: "a b" is not a valid host name`},
		{"servers entry", func(c *Config) { c.Client.Servers = []string{"h:0"} },
			`client.servers[0]: "h:0" has an invalid port "0" (want 1-65535)`},
		{"client without servers", func(c *Config) { c.Server.Enabled = false; c.Client.Servers = nil },
			"client.servers: required when this agent runs no server"},
		{"log_level", func(c *Config) { c.LogLevel = "verbose" },
			`log_level: "verbose" is not a log level (want one of trace, debug, info, warn, error)`},
		{"data_dir missing", func(c *Config) { c.DataDir = "" }, "data_dir: required (only dev mode runs without a data dir)"},
		{"data_dir relative", func(c *Config) { c.DataDir = "data" }, `data_dir: "data" is not an absolute path`},
		{"plugin_dir relative", func(c *Config) { c.PluginDir = "./plugins" }, `plugin_dir: "./plugins" is not an absolute path`},
		{"heartbeat_ttl zero", func(c *Config) { c.Server.HeartbeatTTL = 0 }, "server.heartbeat_ttl: must be positive, got 0s"},
		{"force_detach_after zero", func(c *Config) { c.Server.ForceDetachAfter = 0 }, "server.force_detach_after: must be positive, got 0s"},
		{"volume_reconcile_interval negative", func(c *Config) { c.Server.VolumeReconcileInterval = -1e9 }, "server.volume_reconcile_interval: must be positive, got -1s"},
		{"heartbeat_grace negative", func(c *Config) { c.Server.HeartbeatGrace = -1 }, "server.heartbeat_grace: must not be negative, got -1ns"},
		{"retry_interval zero", func(c *Config) { c.Server.RetryInterval = 0 }, "server.retry_interval: must be positive, got 0s"},
		{"snapshot interval", func(c *Config) { c.Server.RaftSnapshotInterval = 1000 }, "server.raft_snapshot_interval: must be at least 5ms, got 1µs"},
		{"gc_percent zero", func(c *Config) { c.Server.GCPercent = 0 }, "server.gc_percent: 0 is out of range 10-10000"},
		{"gc_percent too large", func(c *Config) { c.Server.GCPercent = 20000 }, "server.gc_percent: 20000 is out of range 10-10000"},
		{"snapshot threshold", func(c *Config) { c.Server.RaftSnapshotThreshold = 0 }, "server.raft_snapshot_threshold: must be at least 1"},
		{"plugin under the wrong name", func(c *Config) { c.Plugins["x"] = &PluginConfig{Name: "y"} },
			`plugin.x: configured under the name "y"`},
		{"several problems", func(c *Config) { c.Ports.RPC = -1; c.LogLevel = ""; c.DataDir = "" },
			"log_level: \"\" is not a log level (want one of trace, debug, info, warn, error)\n" +
				"ports.rpc: -1 is out of range 1-65535\n" +
				"data_dir: required (only dev mode runs without a data dir)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validBase()
			tc.change(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate accepted the config, want %q", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got: %s\nwant: %s", err, tc.want)
			}
			if !errors.Is(err, ErrInvalidValue) {
				t.Errorf("error does not wrap ErrInvalidValue")
			}
		})
	}
}

// Validate names the file and line of values that came from a file, after
// merging several.
func TestValidateNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{
		"a.hcl": "data_dir = \"/d\"\nserver {\n  enabled = true\n}\n",
		"b.hcl": "ports {\n  rpc = 7646\n}\nserver {\n  bootstrap_expect = 0\n}\n",
	})
	c, err := LoadConfigFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "b.hcl")
	want := b + ":5:22: server.bootstrap_expect: must be at least 1 when the server is enabled: the number of servers to wait for before electing a leader\n" +
		b + ":2:9: ports.rpc: 7646 is already the http port"
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("error:\n got: %v\nwant: %s", err, want)
	}

	// Without bootstrap_expect in any file, the error points at what
	// made it necessary.
	testutil.WriteFiles(t, dir, map[string]string{"b.hcl": "name = \"x\"\n"})
	c, err = LoadConfigFiles([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Path != "server.bootstrap_expect" || ce.Pos != (SourcePos{File: filepath.Join(dir, "a.hcl"), Line: 3, Column: 13}) {
		t.Errorf("first error = %+v, want server.bootstrap_expect at a.hcl:3:13", ce)
	}
}

func TestValidateNormalizesAddresses(t *testing.T) {
	c := validBase()
	c.Server.RetryJoin = []string{"10.0.0.1", "[fd00::1]", "node-2.example:9000", " 10.0.0.3:7000 "}
	c.Client.Servers = []string{"localhost"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.1:7647", "[fd00::1]:7647", "node-2.example:9000", "10.0.0.3:7000"}
	if !reflect.DeepEqual(c.Server.RetryJoin, want) {
		t.Errorf("retry_join = %q, want %q", c.Server.RetryJoin, want)
	}
	if !reflect.DeepEqual(c.Client.Servers, []string{"localhost:7647"}) {
		t.Errorf("servers = %q, want [localhost:7647]", c.Client.Servers)
	}
}

func TestNormalizeServerAddr(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "10.0.0.1", want: "10.0.0.1:7647"},
		{in: "10.0.0.1:8000", want: "10.0.0.1:8000"},
		{in: "server-1", want: "server-1:7647"},
		{in: "server-1.dc1.example.com.:7647", want: "server-1.dc1.example.com.:7647"},
		{in: "_srv.example", want: "_srv.example:7647"},
		{in: "[::1]", want: "[::1]:7647"},
		{in: "[::1]:9000", want: "[::1]:9000"},
		{in: "[FD00:0::1]", want: "[fd00::1]:7647"},
		{in: "", err: "empty address"},
		{in: "::1", err: `"::1" is not host or host:port (write IPv6 addresses in brackets, like "[::1]")`},
		{in: "http://a:1", err: `"http://a:1" is not host or host:port (leave out the scheme)`},
		{in: "a:b", err: `"a:b" has an invalid port "b" (want 1-65535)`},
		{in: "a:70000", err: `"a:70000" has an invalid port "70000" (want 1-65535)`},
		{in: "a:", err: `"a:" has an invalid port "" (want 1-65535)`},
		{in: ":7647", err: `":7647" is not host or host:port: "" is not a valid host name`},
		{in: "-a.example", err: `"-a.example" is not host or host:port: "-a.example" is not a valid host name`},
		{in: "a..b", err: `"a..b" is not host or host:port: "a..b" is not a valid host name`},
		{in: "300.1.1.1", err: `"300.1.1.1" is not host or host:port: "300.1.1.1" is neither an IP address nor a host name`},
		{in: "[10.0.0.1]", err: `"[10.0.0.1]" is not host or host:port: "10.0.0.1" in brackets is not an IPv6 address`},
		{in: "[::1", err: `"[::1" is not host or host:port`},
		{in: "a" + strings.Repeat(".b", 130), err: "is not a valid host name"},
	} {
		got, err := NormalizeServerAddr(tc.in)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("NormalizeServerAddr(%q): %v", tc.in, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("NormalizeServerAddr(%q) = %q, want %q", tc.in, got, tc.want)
		case tc.err != "" && (err == nil || !strings.HasSuffix(err.Error(), tc.err)):
			t.Errorf("NormalizeServerAddr(%q) = %q, %v; want error %q", tc.in, got, err, tc.err)
		case tc.err != "" && !errors.Is(err, ErrInvalidValue):
			t.Errorf("NormalizeServerAddr(%q) error does not wrap ErrInvalidValue", tc.in)
		}
	}
}

func TestConfigHelpers(t *testing.T) {
	c := DefaultConfig()
	c.BindAddr = "::1"
	if got := c.HTTPAddr(); got != "[::1]:7646" {
		t.Errorf("HTTPAddr = %q", got)
	}
	if got := c.RPCAddr(); got != "[::1]:7647" {
		t.Errorf("RPCAddr = %q", got)
	}
	if got := c.RaftAddr(); got != "[::1]:7648" {
		t.Errorf("RaftAddr = %q", got)
	}

	c.DataDir = "/var/lib/berth"
	if got := c.EffectivePluginDir(); got != "/var/lib/berth/plugins" {
		t.Errorf("EffectivePluginDir = %q, want <data_dir>/plugins", got)
	}
	c.PluginDir = "/opt/plugins"
	if got := c.EffectivePluginDir(); got != "/opt/plugins" {
		t.Errorf("EffectivePluginDir = %q, want plugin_dir", got)
	}

	host, err := c.NodeName()
	if err != nil || host == "" {
		t.Fatalf("NodeName with nothing set = %q, %v; want the host name", host, err)
	}
	c.Name = "agent-1"
	if got, _ := c.NodeName(); got != "agent-1" {
		t.Errorf("NodeName = %q, want Name", got)
	}
	c.Client.NodeName = "node-1"
	if got, _ := c.NodeName(); got != "node-1" {
		t.Errorf("NodeName = %q, want client.node_name", got)
	}
	if got, _ := c.AgentName(); got != "agent-1" {
		t.Errorf("AgentName = %q, want Name", got)
	}
}
