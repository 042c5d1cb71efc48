package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"berth.dev/berth/internal/testutil"
)

func TestDevPluginDirIsBesideTheBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "berth")
	if got := devPluginDir(exe); got != "" {
		t.Errorf("devPluginDir with no plugins dir beside the binary = %q, want none", got)
	}
	if err := os.Mkdir(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := devPluginDir(exe); got != filepath.Join(dir, "plugins") {
		t.Errorf("devPluginDir = %q, want %s", got, filepath.Join(dir, "plugins"))
	}
}

// The containerd driver (examples/containerd, built as `make plugins`
// builds it) in a dev agent's plugin dir, with containerd's socket absent:
// the agent starts, and the node shows the driver unhealthy, saying which
// socket does not answer.
func TestDevAgentShowsContainerdDriverUnhealthyWithoutSocket(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the containerd driver plugin")
	}
	pluginDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(pluginDir, "containerd"), ".")
	build.Dir = filepath.Join("..", "..", "examples", "containerd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/containerd: %v\n%s", err, out)
	}
	sock := filepath.Join(t.TempDir(), "containerd.sock")
	cfg := DevConfig()
	cfg.PluginDir = pluginDir
	cfg.Plugins["containerd"] = &PluginConfig{Name: "containerd", Config: map[string]any{"address": sock}}
	a := startAgent(t, cfg)
	testutil.WaitFor(t, 60*time.Second, func() error {
		d := nodeDrivers(t, a)["containerd"]
		if d == nil || d.GetHealthy() || d.GetBuiltin() || !strings.Contains(d.GetHealthDescription(), sock) {
			return fmt.Errorf("containerd on the node: %v; want unhealthy, naming %s", d, sock)
		}
		return nil
	})
	if d := nodeDrivers(t, a)["raw_exec"]; !d.GetHealthy() {
		t.Fatalf("raw_exec: %v", d)
	}
}
