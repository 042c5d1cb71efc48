package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
	"berth.dev/berth/internal/version"
	"berth.dev/berth/rpc/apijson"
	"berth.dev/berth/rpc/pb"
	"berth.dev/berth/sdk"
)

// startAgent starts an agent from cfg on free loopback ports and waits
// until its node is registered.
func startAgent(t *testing.T, cfg *Config) *Agent {
	t.Helper()
	cfg.Ports = Ports{} // port 0: free ports, no race with other tests
	a, err := New(cfg, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Shutdown)
	testutil.WaitFor(t, 60*time.Second, func() error {
		if !a.Client().Registered() {
			return errors.New("node not registered yet")
		}
		return nil
	})
	return a
}

// nodeDrivers reads the node's drivers as the servers know them.
func nodeDrivers(t *testing.T, a *Agent) map[string]*pb.DriverInfo {
	t.Helper()
	r := do(t, a, "GET", "/v1/node/"+a.Client().NodeID(), nil)
	if r.status != 200 {
		t.Fatalf("GET node: %d %s", r.status, r.body)
	}
	var n pb.Node
	if err := apijson.Unmarshal(r.body, &n); err != nil {
		t.Fatalf("decoding node %s: %v", r.body, err)
	}
	return n.GetDrivers()
}

func TestDevAgentNodeShowsBuiltinDrivers(t *testing.T) {
	a := startAgent(t, DevConfig())
	drivers := nodeDrivers(t, a)
	healthy := []string{"raw_exec", "mock"}
	if os.Geteuid() == 0 {
		healthy = append(healthy, "exec") // dev mode enables it for root
	}
	for _, name := range healthy {
		d := drivers[name]
		if !d.GetHealthy() || !d.GetDetected() || !d.GetBuiltin() || d.GetVersion() != version.Version ||
			d.GetHealthDescription() != "healthy" || d.GetAttributes()["driver."+name] != "true" {
			t.Fatalf("driver %s on the node: %v", name, d)
		}
	}
	if len(drivers) != 3 {
		t.Fatalf("drivers %v, want raw_exec, mock and exec", drivers)
	}
}

func TestDriverHealthChangesReachTheServers(t *testing.T) {
	cfg := DevConfig()
	cfg.Plugins["mock"] = &PluginConfig{Name: "mock", Config: map[string]any{"unhealthy_after": "1s"}}
	a := startAgent(t, cfg)
	testutil.WaitFor(t, 60*time.Second, func() error {
		d := nodeDrivers(t, a)["mock"]
		if d.GetHealthy() || !strings.Contains(d.GetHealthDescription(), "unhealthy_after") {
			return fmt.Errorf("mock on the node: %v", d)
		}
		return nil
	})
	if d := nodeDrivers(t, a)["raw_exec"]; !d.GetHealthy() {
		t.Fatalf("raw_exec: %v", d)
	}
}

func TestAgentRefusesInvalidPluginConfig(t *testing.T) {
	cfg := DevConfig()
	cfg.Ports = Ports{} // port 0: free ports, no race with other tests
	cfg.Plugins["raw_exec"] = &PluginConfig{Name: "raw_exec", Config: map[string]any{"enabld": true}, Source: "agent.hcl:3"}
	a, err := New(cfg, testutil.Logger(t))
	if err == nil {
		a.Shutdown()
		t.Fatal("agent started with an invalid plugin config")
	}
	var ce *sdk.ConfigError
	if !errors.Is(err, sdk.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Plugin != "raw_exec" || ce.Key != "enabld" ||
		!strings.Contains(err.Error(), "agent.hcl:3") {
		t.Fatalf("error %v does not name raw_exec, enabld and agent.hcl:3", err)
	}
}

func TestAgentRunsPluginDirDriversAndSurvivesBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// A third-party "mock" (this binary serving the mock driver from
	// plugin_dir) replaces the built-in one; "crashy" dies at start.
	mockPath := write("mock", fmt.Sprintf("exec %q builtin driver mock", exe))
	write("crashy", `echo "crashy: missing /etc/crashy.conf" >&2; exit 1`)
	cfg := DevConfig()
	cfg.PluginDir = dir
	a := startAgent(t, cfg)

	drivers := nodeDrivers(t, a)
	if d := drivers["mock"]; !d.GetHealthy() || d.GetBuiltin() || d.GetPath() != mockPath {
		t.Fatalf("plugin_dir mock: %v", d)
	}
	if d := drivers["raw_exec"]; !d.GetHealthy() || !d.GetBuiltin() {
		t.Fatalf("raw_exec: %v", d)
	}
	d := drivers["crashy"]
	if d.GetHealthy() || d.GetBuiltin() || !strings.Contains(d.GetHealthDescription(), "crashy: missing /etc/crashy.conf") ||
		!strings.Contains(d.GetHealthDescription(), "retrying in") {
		t.Fatalf("crashy: %v", d)
	}
}
